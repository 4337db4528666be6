#!/bin/bash
# run 143 (survey, HEAD ff23d9a, all head dims, sm_80 + sm_90a): the failing decode seed of run 142 again;
# D = 256 backward and forward against SDPA (train-bench with python3, bench with SDPA).
set -u
N=143; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for i in 1 2; do
ATTN_TEST_SEED=3766166809475418325 timeout 200 N/gpu --ignored --exact seqs::correctness_seqs_decode > $R/decode_seed_$i.log 2>&1; echo "rc=$?" >> $R/decode_seed_$i.log
done
timeout 240 N/xtask train-bench --shapes "4,16,4096,256;2,16,8192,256" --python python3 --iters 10 --varlen-seqs 0 --json $R/train256.json > $R/train256.log 2>&1; echo "rc=$?" >> $R/train256.log
for s in 4,16,4096,256 1,16,16384,256; do for c in none bottom-right; do
timeout 90 N/xtask bench --shape $s --causal $c --dtype bf16 --samples 100 --out-dir /tmp/b$N > $R/bench_${s}_$c.log 2>&1
done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
