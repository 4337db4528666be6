#!/bin/bash
# run 164: the deterministic backward (N: rotated turns spaced k = Q/N, no rotation past the SM count, D = 256 causal turns passed one block later) against HEAD f073d11 (base), 64/128/256 builds: backward GPU tests on N, then train-bench alternating three times.
set -u
N=164; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 240 N/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log
for i in 1 2 3; do for b in base N; do
s=$(date +%s)
timeout 150 $b/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128;4,16,4096,256;2,16,8192,128" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1
echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$i.log
done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
