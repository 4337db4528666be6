#!/bin/bash
# run 218 (H200): A = ca8a255; N = A + the backward's row passes rebuilt: Δ four rows per warp
# with 16-byte loads all issued first (both engines), the wgmma dQ pass one CTA per tile through
# shared memory with 16-byte row stores, the mma.sync dQ pass 16-byte loads; no zeroing of LSE₂
# / Δ on the wgmma path. Backward tests, memcheck + racecheck; per-kernel times under ncu (A, N);
# train-bench alternating A, N.
set -u
N=218; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 150 N/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
for tool in memcheck racecheck; do
for t in backward::sanitize_backward_small backward_general::sanitize_backward_general_small; do
  s=$(date +%s); timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact $t > $R/${tool}_${t##*::}.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/${tool}_${t##*::}.log
done
done
for b in A N; do
  s=$(date +%s); timeout 90 ncu --metrics gpu__time_duration.sum,dram__bytes.sum.per_second -k 'regex:prep|_dq_|delta' --launch-count 40 $b/xtask train-bench --shapes "4,16,4096,128" --python none --warmup 0 --iters 1 --varlen-seqs 0 > $R/ncu_times_$b.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ncu_times_$b.log
done
for round in 1 2 3; do
  for b in A N; do
    s=$(date +%s); timeout 60 $b/xtask train-bench --shapes "4,16,4096,128;4,16,4096,64" --python none --iters 10 --varlen-seqs 4 > $R/train_${b}_$round.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$round.log
  done
done
