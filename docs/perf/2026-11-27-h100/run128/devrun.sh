#!/bin/bash
# run 128: the final build of the session (93deb4b; all head dims, sm_80 + sm_90a): the whole GPU suite, attn-candle's CUDA tests, and train-bench on it twice (with SDPA's backends once).
set -u
N=128; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 420 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$?" >> $R/suite.log
(export LD_LIBRARY_PATH="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
 timeout 200 N/candle_gpu --ignored --test-threads 1 > $R/candle.log 2>&1; echo "rc=$?" >> $R/candle.log)
timeout 150 N/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128" --python none --iters 10 --varlen-seqs 0 --json $R/train_N_1.json > $R/train_N_1.log 2>&1; echo "rc=$?" >> $R/train_N_1.log
timeout 240 N/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128" --iters 10 --varlen-seqs 0 --json $R/train_N_sdpa.json > $R/train_N_sdpa.log 2>&1; echo "rc=$?" >> $R/train_N_sdpa.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
