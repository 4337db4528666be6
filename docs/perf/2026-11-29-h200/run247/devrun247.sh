#!/bin/bash
# run 247 (H200): the mma.sync backward's deterministic turns passed one block late (at the
# next block's first barrier, by which time its dQ atomics have drained) instead of behind a
# second barrier and a drain on warp 0, with the rotated walk (bwd_rotated_turn) for plain
# non-causal launches and the reversed walk for causal ones (R6), against B0 (0bff797).
# R6's backward tests (D 64/128 build), then train-bench (no SDPA), alternating, two rounds.
set -u
N=247; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 200 R6/gpu --ignored backward > $R/tests_R6.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_R6.log
for i in 1 2; do
  for b in B0 R6; do
    s=$(date +%s); timeout 100 $b/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128" --iters 20 --varlen-seqs 0 --python none --json $R/train_${b}_$i.json > $R/train_${b}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$i.log
  done
done
