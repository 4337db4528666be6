#!/bin/bash
# run 255 (H200): the landing build F2 = 4c3821a + the D > 192 feature launches on the default
# 80-key ping-pong tile (sm_90a, every head dim). The whole GPU suite on F2; compute-sanitizer
# memcheck on the every-bucket feature test; train-bench at D = 256 on B0 (4c3821a) and F2,
# alternating, two rounds.
set -u
N=255; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 280 F2/gpu --ignored > $R/suite_F2.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite_F2.log
for i in 1 2; do
  for b in B0 F2; do
    s=$(date +%s); timeout 60 $b/xtask train-bench --shapes "4,16,4096,256" --iters 20 --varlen-seqs 0 --python none > $R/train_${b}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$i.log
  done
done
s=$(date +%s); timeout 150 compute-sanitizer --tool memcheck F2/gpu --ignored features::correctness_features_every_bucket > $R/memcheck_F2.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/memcheck_F2.log
