#!/bin/bash
# run 243 (H200): B0 = 5d4272b (sm_90a, D 64/128/256); B3 = B0 + (D = 256, deterministic
# causal) the last block's turn passed at the start of the next block and the turn probed a
# GEMM before its wait (run 242's B1, without the probe on non-causal launches, which cost
# them 4 %), + (D <= 128) the dQ writers take the turn before the staging and free the
# staging once the reduce has read it. B4 = B3 + the mma.sync backward's thread 0 reads its
# turn relaxed before the dQ MMAs and, if it has come, fences instead of spinning after them.
# B4's backward tests, then train-bench (no SDPA), alternating, two rounds.
set -u
N=243; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 240 B4/gpu --ignored backward > $R/tests_B4.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_B4.log
for i in 1 2; do
  for b in B0 B3 B4; do
    s=$(date +%s); timeout 150 $b/xtask train-bench --shapes "4,16,4096,256;2,16,8192,128;4,16,4096,128" --iters 20 --varlen-seqs 0 --python none --json $R/train_${b}_$i.json > $R/train_${b}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$i.log
  done
done
