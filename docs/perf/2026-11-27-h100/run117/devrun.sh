#!/bin/bash
# run 117: the mma.sync backward's deterministic mode with the rotated walk (as the wgmma one); base (HEAD kernels, new train-bench) vs N; tests on N (all head dims).
set -u
N=117; R=/tmp/r$N; P=/tmp/p$N; ROOT=$PWD
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 300 N/gpu --ignored backward::correctness_backward_seed backward::determinism backward::stability backward_general::determinism backward::sanitize_backward_small backward::correctness_backward_tails > $R/tests_N.log 2>&1; echo "rc=$?" >> $R/tests_N.log
for i in 1 2; do
for b in base N; do
timeout 150 $b/xtask train-bench --shapes "4,16,4096,64;2,16,8192,64;4,16,4096,128" --python none --iters 10 --varlen-seqs 0 --json $R/train_${b}_$i.json > $R/train_${b}_$i.log 2>&1; echo "rc=$?" >> $R/train_${b}_$i.log
done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
