#!/bin/bash
# run 245 (H200): train-bench (no SDPA) at 4,16,4096,64 on B0 (5d4272b) and F (91285cb, the
# landed turns: at D = 64 the dQ writers' reorder), alternating, two rounds.
set -u
N=245; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
for i in 1 2; do
  for b in B0 F; do
    s=$(date +%s); timeout 100 $b/xtask train-bench --shapes "4,16,4096,64" --iters 20 --varlen-seqs 0 --python none --json $R/train_${b}_$i.json > $R/train_${b}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$i.log
  done
done
