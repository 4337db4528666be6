#!/bin/bash
# run 246 (H200): the mma.sync backward's deterministic non-causal walk rotated (R5 = 1a774c6 +
# bwd_rotated_turn in the mma.sync kernel, det_rotated set for its plain launches), against
# B0 (5d4272b; the same mma.sync code as 1a774c6). R5's backward tests (D 64/128 build), then
# train-bench (no SDPA) at 4,16,4096,64 and 4,16,4096,128, alternating, two rounds.
set -u
N=246; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 200 R5/gpu --ignored backward > $R/tests_R5.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_R5.log
for i in 1 2; do
  for b in B0 R5; do
    s=$(date +%s); timeout 100 $b/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128" --iters 20 --varlen-seqs 0 --python none --json $R/train_${b}_$i.json > $R/train_${b}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$i.log
  done
done
