#!/bin/bash
# run 221 (H200): A = d0cdcdc (the faster row passes); N = A + the wgmma Δ pass zeroes the dQ
# accumulator (no memset pass) + the sustained-clock bench and train-step timing (xtask).
# Backward tests, sanitizers (memcheck, racecheck, initcheck, synccheck) on the small backward
# sets; per-kernel times under ncu (A, N); train-bench without SDPA alternating A, N (the
# per-phase backward loops are the same code in both).
set -u
N=221; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 150 N/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
for tool in memcheck racecheck initcheck synccheck; do
for t in backward::sanitize_backward_small backward_general::sanitize_backward_general_small; do
  s=$(date +%s); timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact $t > $R/${tool}_${t##*::}.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/${tool}_${t##*::}.log
done
done
for b in A N; do
  s=$(date +%s); timeout 60 ncu --metrics gpu__time_duration.sum,dram__bytes.sum.per_second -k 'regex:wg_prep|wg_dq' --launch-count 6 $b/xtask train-bench --shapes "4,16,4096,128" --python none --warmup 0 --iters 1 --varlen-seqs 0 > $R/ncu_times_$b.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ncu_times_$b.log
done
for round in 1 2 3; do
  for b in A N; do
    s=$(date +%s); timeout 60 $b/xtask train-bench --shapes "4,16,4096,128;4,16,4096,64" --python none --iters 20 --varlen-seqs 4 > $R/train_${b}_$round.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$round.log
  done
done
