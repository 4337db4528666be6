#!/bin/bash
# run 135: the session's final build (6adf27f; all head dims, sm_80 + sm_90a): the whole GPU suite, attn-candle's CUDA tests, train-bench (once without, once with SDPA's backends); then an A/B of plain non-causal D = 128 under 1024 keys on the 128-key tile without / with ping-pong (xtask bench --no-sdpa, two rounds).
set -u
N=135; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 420 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$?" >> $R/suite.log
(export LD_LIBRARY_PATH="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
 timeout 200 N/candle_gpu --ignored --test-threads 1 > $R/candle.log 2>&1; echo "rc=$?" >> $R/candle.log)
timeout 150 N/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128" --python none --iters 10 --varlen-seqs 0 --json $R/train_N_1.json > $R/train_N_1.log 2>&1; echo "rc=$?" >> $R/train_N_1.log
timeout 240 N/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128" --iters 10 --varlen-seqs 0 --json $R/train_N_sdpa.json > $R/train_N_sdpa.log 2>&1; echo "rc=$?" >> $R/train_N_sdpa.log
for i in 1 2; do
for s in 2,8,512,128 8,16,512,128 4,16,1000,128 16,16,256,128; do for c in wg128_128_s2_ia wg128_128_s2_pp_ia; do
timeout 60 N/xtask bench --shape $s --causal none --dtype bf16 --no-sdpa --samples 200 --config $c --out-dir /tmp/b135 > $R/b_${s}_${c}_$i.log 2>&1
done; done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
