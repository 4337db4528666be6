#!/bin/bash
# run 122: ALiBi's key term as one FFMA per score with its row term in the softmax (Hopper feature entries), and the D <= 64 feature entries on the 192-row ping-pong tile, on top of run 121's softcap tanh.approx: tests on N, then train-bench base (HEAD 7eceb53) vs N twice alternating.
set -u
N=122; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 240 N/gpu --ignored features:: backward_general:: seqs:: > $R/tests_N.log 2>&1; echo "rc=$?" >> $R/tests_N.log
for i in 1 2; do
for b in base N; do
timeout 150 $b/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128" --python none --iters 10 --varlen-seqs 0 --json $R/train_${b}_$i.json > $R/train_${b}_$i.log 2>&1; echo "rc=$?" >> $R/train_${b}_$i.log
done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
