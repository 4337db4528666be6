#!/bin/bash
# run 288 (H200): the small-smem tests after the FP8 default fix (run 287: the rest of the suite
# passed, 93 of 94), and all three under memcheck.
set -u
N=288; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 100 N/gpu --ignored small_smem 99_kib > $R/small.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/small.log
s=$(date +%s); timeout 250 compute-sanitizer --tool memcheck --error-exitcode 9 N/gpu --ignored small_smem > $R/memcheck_small.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/memcheck_small.log
