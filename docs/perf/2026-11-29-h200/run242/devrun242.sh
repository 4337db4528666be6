#!/bin/bash
# run 242 (H200): the deterministic D = 256 backward's turns. B0 = 5d4272b (sm_90a, D 64/128/256);
# B1 = B0 + the last block's turn passed at the start of the next block (while its Sᵀ/dPᵀ
# GEMMs run) instead of at its dQ, and the turn's semaphore probed a GEMM before the wait.
# B1's backward tests, then train-bench (no SDPA) on both, alternating, two rounds.
set -u
N=242; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 240 B1/gpu --ignored backward > $R/tests_B1.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_B1.log
for i in 1 2; do
  for b in B0 B1; do
    s=$(date +%s); timeout 150 $b/xtask train-bench --shapes "4,16,4096,256" --iters 20 --varlen-seqs 0 --python none --json $R/train_${b}_$i.json > $R/train_${b}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$i.log
  done
done
