#!/bin/bash
# run 158: the Hopper backward's dK/dV epilogue through shared memory (16-byte row stores, N) against HEAD 6722776 (base), 64/128/256 builds: train-bench alternating, three times; the backward GPU tests and compute-sanitizer (4 tools) on the small backward set, on N.
set -u
N=158; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for i in 1 2 3; do for b in base N; do
timeout 120 $b/xtask train-bench --shapes "4,16,4096,128;2,16,8192,128;4,16,4096,64;4,16,4096,256" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1
done; done
timeout 200 N/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log
for tool in memcheck racecheck synccheck initcheck; do
timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact backward::sanitize_backward_small --test-threads 1 > $R/${tool}.log 2>&1; echo "rc=$?" >> $R/${tool}.log
done
tar czf $OUT/logs$N.tgz -C /tmp r$N
