#!/bin/bash
# run 269 (H200): the landing build (3ff5e42, sm_90a, every head dim): attn-candle's CUDA tests
# (not run since 2026-11-29's seventh session), then the backward tests on the final host code
# (FlashAttention::backward_arch).
set -u
N=269; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 200 F/gpu --ignored backward > $R/tests_backward.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_backward.log
export LD_LIBRARY_PATH="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
s=$(date +%s); timeout 120 F/candle --ignored --test-threads 1 > $R/candle.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/candle.log
