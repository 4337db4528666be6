#!/bin/bash
# run 168: the landing build (HEAD 9173173, all head dims, sm_80 + sm_90a): the whole GPU suite; xtask bench of the seed shapes (CUDA graphs under 20 us, SDPA in the same process) and 1,8,512,128.
set -u
N=168; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 290 N/gpu --ignored > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
timeout 80 N/xtask bench --shapes seed --samples 200 --out-dir $R/b_seed > $R/bench_seed.log 2>&1; echo "rc=$?" >> $R/bench_seed.log
timeout 20 N/xtask bench --shape 1,8,512,128 --samples 200 --out-dir $R/b_d128 > $R/bench_d128.log 2>&1; echo "rc=$?" >> $R/bench_d128.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
