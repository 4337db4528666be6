#!/bin/bash
# run 157: D = 256 backward in FlashAttention-3's order (dSᵀ stored, dV queued, the barrier, dQ chunk 0, dK, chunk 0 staged while dK runs) (N) against HEAD 6722776 (base), 256-only builds: train-bench alternating, three times; the backward GPU tests on N.
set -u
N=157; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for i in 1 2 3; do for b in base N; do
timeout 120 $b/xtask train-bench --shapes "4,16,4096,256;2,16,8192,256" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1
done; done
timeout 200 N/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
