#!/bin/bash
# run 139: the final build (D <= 64 small grids on the 128-row ping-pong tile; all head dims, sm_80 + sm_90a): the whole GPU suite; the seed shapes against SDPA (f16, bf16); train-bench with SDPA once.
set -u
N=139; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 420 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$?" >> $R/suite.log
timeout 240 N/xtask bench --shapes seed --dtype both --out-dir $R/seed > $R/seed.log 2>&1; echo "rc=$?" >> $R/seed.log
timeout 240 N/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128" --iters 10 --varlen-seqs 0 --json $R/train_N_sdpa.json > $R/train_N_sdpa.log 2>&1; echo "rc=$?" >> $R/train_N_sdpa.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
