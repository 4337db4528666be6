#!/bin/bash
# run 308 (H200): the final kernels: the whole GPU suite, then the debug:: tests on the debug-kernels build.
set -u
N=308; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; tar xJf target/pack${N}D.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 420 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
s=$(date +%s); timeout 120 D/gpu --ignored debug:: > $R/debug.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/debug.log
