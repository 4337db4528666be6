#!/bin/bash
# run 145: D = 256 deterministic mode passes each block's turn on one block late (the fence off the critical path): backward GPU tests, train-bench D = 256 with SDPA.
set -u
N=145; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 300 N/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log
timeout 200 N/xtask train-bench --shapes "4,16,4096,256;2,16,8192,256" --python python3 --iters 10 --varlen-seqs 0 --json $R/train256.json > $R/train256.log 2>&1; echo "rc=$?" >> $R/train256.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
