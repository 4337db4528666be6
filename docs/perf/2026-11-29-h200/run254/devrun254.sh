#!/bin/bash
# run 254 (H200): ALiBi's key term as the Q·Kᵀ accumulator's initial value (alibi_prebias), and
# the D > 192 feature launches on the default 80-key ping-pong tile. B0 = 4c3821a (sm_90a, every
# head dim); N = B0 + both (sm_90a, D 64/128/256). N's feature and sequence tests, then
# train-bench (no SDPA) on both, alternating, two rounds.
set -u
N=254; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 200 N/gpu --ignored features:: > $R/tests_features_N.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_features_N.log
s=$(date +%s); timeout 150 N/gpu --ignored seqs:: > $R/tests_seqs_N.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_seqs_N.log
for i in 1 2; do
  for b in B0 N; do
    s=$(date +%s); timeout 120 $b/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128;4,16,4096,256" --iters 20 --varlen-seqs 0 --python none > $R/train_${b}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$i.log
  done
done
