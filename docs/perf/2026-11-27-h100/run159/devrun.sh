#!/bin/bash
# run 159: the mma.sync backward's causal CTAs in longest-first order too (bwd_lpt_order moved to bwd_kernel.cuh, N) against HEAD 6722776 (base), 64/128/256 builds: train-bench alternating, three times (the mma.sync columns); then N against SDPA flash/cuDNN in the same call (the standing); the backward GPU tests on N.
set -u
N=159; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for i in 1 2 3; do for b in base N; do
timeout 120 $b/xtask train-bench --shapes "4,16,4096,128;4,16,4096,64;2,16,8192,128" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1
done; done
timeout 240 N/xtask train-bench --shapes "4,16,4096,128;2,16,8192,128;1,16,16384,128;4,16,4096,64;4,16,4096,256" --python python3 --iters 10 --varlen-seqs 0 --json $R/sdpa.json > $R/sdpa.log 2>&1; echo "rc=$?" >> $R/sdpa.log
timeout 200 N/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
