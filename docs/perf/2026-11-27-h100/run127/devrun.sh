#!/bin/bash
# run 127: non-causal D = 128 feature launches from 1024 keys on run the dense default's wide 176-key ping-pong tile (new _feat entries): features, seqs and hopper tests on N; train-bench prev (a535ca3, the V-tail change) vs N twice alternating.
set -u
N=127; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 240 N/gpu --ignored features:: seqs:: hopper:: > $R/tests_N.log 2>&1; echo "rc=$?" >> $R/tests_N.log
for i in 1 2; do
for b in prev N; do
timeout 150 $b/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128" --python none --iters 10 --varlen-seqs 0 --json $R/train_${b}_$i.json > $R/train_${b}_$i.log 2>&1; echo "rc=$?" >> $R/train_${b}_$i.log
done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
