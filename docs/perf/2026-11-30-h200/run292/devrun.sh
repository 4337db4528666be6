#!/bin/bash
# run 292 (H200): the backward's 32-key tile for 99 KiB parts (D = 160–256), through a launcher
# limited to 99 KiB: its correctness test, then compute-sanitizer on the small backward set.
set -u
N=292; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 240 N/gpu --ignored --exact backward::correctness_backward_99_kib_tile backward::sanitize_backward_small > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
for tool in memcheck racecheck synccheck initcheck; do
s=$(date +%s); timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact backward::sanitize_backward_small > $R/$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$tool.log
done
