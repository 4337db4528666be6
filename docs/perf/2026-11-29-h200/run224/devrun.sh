#!/bin/bash
# run 224 (H200): F = 3ecda18, the session's final code (all head dims, sm_80 + sm_90a). The
# whole GPU suite and attn-candle's CUDA tests; the standing: bench large with SDPA (sustained
# clocks) and train-bench with SDPA (training steps on both sides).
set -u
N=224; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 250 F/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
export LD_LIBRARY_PATH="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
s=$(date +%s); timeout 60 F/candle --ignored --test-threads 1 > $R/candle.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/candle.log
s=$(date +%s); timeout 120 F/xtask bench --shapes large --dtype both --samples 200 --out-dir $R/bench_large > $R/bench_large.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/bench_large.log
s=$(date +%s); timeout 90 F/xtask train-bench --shapes "4,16,4096,128;2,16,8192,128" --iters 20 --varlen-seqs 0 > $R/train.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train.log
