#!/bin/bash
# run 151: D = 256 backward dQ staging in two 1 KiB buffers per warp, taken in turn (N), against one 2 KiB buffer (base = HEAD a047129, the kernels of runs 148–150): train-bench D = 256 alternating, twice; the backward GPU tests on N.
set -u
N=151; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for i in 1 2; do for b in base N; do
timeout 100 $b/xtask train-bench --shapes "4,16,4096,256;2,16,8192,256" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1
done; done
timeout 200 N/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
