#!/bin/bash
# run 214 (H200): F = run 213 + Engine::Auto gives causal dense launches of at most 64 rows
# to the Hopper sequence entries when their heuristic splits them (speculative decoding's
# verify step). serve-bench (chunked prefill now with 16 new tokens); the whole GPU suite;
# attn-candle's CUDA tests.
set -u
N=214; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 100 F/xtask serve-bench --json $R/serve_F.json >> $R/serve_F.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve_F.log
s=$(date +%s); timeout 360 F/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
export LD_LIBRARY_PATH="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
s=$(date +%s); timeout 90 F/candle --ignored --test-threads 1 > $R/candle.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/candle.log
