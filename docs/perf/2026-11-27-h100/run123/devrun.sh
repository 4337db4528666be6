#!/bin/bash
# run 123: the backward's softcap derivative from an exact 1 - tanh^2 (softcap_dtanh) while P keeps the forward's tanh.approx, on top of run 122: backward_general and features tests on N, then train-bench base (HEAD 7eceb53) vs N three times alternating.
set -u
N=123; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 200 N/gpu --ignored backward_general:: features:: backward:: > $R/tests_N.log 2>&1; echo "rc=$?" >> $R/tests_N.log
for i in 1 2 3; do
for b in base N; do
timeout 150 $b/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128" --python none --iters 10 --varlen-seqs 0 --json $R/train_${b}_$i.json > $R/train_${b}_$i.log 2>&1; echo "rc=$?" >> $R/train_${b}_$i.log
done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
