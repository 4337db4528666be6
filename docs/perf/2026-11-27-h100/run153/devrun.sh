#!/bin/bash
# run 153: causal backward CTAs in longest-first order, heads grouped for the L2 (bwd_lpt_order, N) against 9ff58aa (base): train-bench alternating, twice; the backward GPU tests on N (64/128 build).
set -u
N=153; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for i in 1 2; do for b in base N; do
timeout 120 $b/xtask train-bench --shapes "4,16,4096,128;2,16,8192,128;4,16,4096,64;8,16,2048,128" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1
done; done
timeout 200 N/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
