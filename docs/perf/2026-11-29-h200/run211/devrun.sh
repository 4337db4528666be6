#!/bin/bash
# run 211 (H200): A = cbf2984 (run 210's build); F = A + paged caches of 16-row TMA boxes
# (power-of-two pages, pages of 16) copied by the producer warpgroup with cp.async (each tile waited for before the next is issued) instead of
# TMA boxes. serve-bench A/F alternating (varlen set: paged prefill at pages 16/64/256);
# F's seqs::, features::, hopper:: tests; memcheck and racecheck on the corrupt-index test.
set -u
N=211; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for tool in memcheck racecheck; do
  s=$(date +%s); timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 F/gpu --ignored --exact seqs::sanitize_seqs_corrupt_device_indices > $R/san_$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/san_$tool.log
done
s=$(date +%s); timeout 200 F/gpu --ignored seqs:: features:: hopper:: > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
for b in A F A F; do
  s=$(date +%s); timeout 70 $b/xtask serve-bench --json $R/serve_$b.json >> $R/serve_$b.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve_$b.log
done
