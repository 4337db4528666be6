#!/bin/bash
# run 315 (H200): the final kernels (kWide at D = 192/256): the whole GPU suite, then memcheck on
# the small backward test (both engines, D = 64 and 256). Logs go straight to $OUT.
set -u
N=315; R=$OUT/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
cd $P
date -u > $R/date.txt
s=$(date +%s); timeout 255 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
s=$(date +%s); timeout 25 compute-sanitizer --tool memcheck --error-exitcode 9 N/gpu --ignored --exact backward::sanitize_backward_small > $R/memcheck.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/memcheck.log
