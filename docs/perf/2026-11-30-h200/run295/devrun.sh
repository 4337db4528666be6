#!/bin/bash
# run 295 (H200): the session's landing kernels (e48ea84 + 7a140dd's launcher): the whole GPU suite.
set -u
N=295; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 420 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
