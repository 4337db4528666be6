#!/bin/bash
# run 113: deterministic wgmma backward: base (HEAD), W (a dQ writer per stage), R1 (W + key block n starts at query block n), R2 (W + starts at −n); train-bench (20 iters) twice alternating; tests on R2.
set -u
N=113; R=/tmp/r$N; P=/tmp/p$N; ROOT=$PWD
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 300 R2/gpu --ignored backward::correctness_backward_seed backward::determinism backward::stability backward_general::determinism backward_general::correctness_backward_varlen backward::sanitize_backward_small backward::validation > $R/tests_R2.log 2>&1; echo "rc=$?" >> $R/tests_R2.log
for i in 1 2; do
for b in base W R1 R2; do
timeout 150 $b/xtask train-bench --shapes "4,16,4096,64;2,16,8192,64;4,16,4096,128;1,16,16384,128" --python none --iters 20 --varlen-seqs 0 --json $R/train_${b}_$i.json > $R/train_${b}_$i.log 2>&1; echo "rc=$?" >> $R/train_${b}_$i.log
done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
