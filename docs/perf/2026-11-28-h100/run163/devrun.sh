#!/bin/bash
# run 163: deterministic backward — rotated turns spaced k = Q/N apart (k = 2 at D <= 128 self-attention), no rotation when a head's key blocks outnumber the SMs (the rotated walk hangs there), D = 256's turn passed one block later (N) against HEAD f073d11 (base), 64/128/256 builds: the backward GPU tests on N (with the new >132-key-block cases), then train-bench alternating twice.
set -u
N=163; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 240 N/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log
for i in 1 2; do for b in base N; do
s=$(date +%s)
timeout 150 $b/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128;4,16,4096,256" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1
echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$i.log
done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
