#!/bin/bash
# run 114: mma.sync backward with 128-key CTAs (BN 64 -> 128, halving the dQ atomics) at buckets 64/128; base (HEAD) vs N; train-bench twice alternating; tests on N.
set -u
N=114; R=/tmp/r$N; P=/tmp/p$N; ROOT=$PWD
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 300 N/gpu --ignored backward::correctness_backward_seed backward::determinism backward::correctness_backward_tails backward_general::determinism backward_general::correctness_backward_varlen backward::sanitize_backward_small > $R/tests_N.log 2>&1; echo "rc=$?" >> $R/tests_N.log
for i in 1 2; do
for b in base N; do
timeout 150 $b/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128" --python none --iters 10 --varlen-seqs 0 --json $R/train_${b}_$i.json > $R/train_${b}_$i.log 2>&1; echo "rc=$?" >> $R/train_${b}_$i.log
done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
