#!/bin/bash
# run 259 (H200): E = f1f66d6 with the wgmma backward's register split at FlashAttention-3's
# 24 / 240 (producer / consumers) instead of 48 / 224 (sm_90a, D = 128 only). train-bench at D = 128 on B (f1f66d6, every head dim) and E, alternating, two rounds.
set -u
N=259; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
for i in 1 2; do
  for b in B E; do
    s=$(date +%s); timeout 60 $b/xtask train-bench --shapes "4,16,4096,128" --iters 20 --varlen-seqs 0 --python none > $R/train_${b}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$i.log
  done
done
