#!/bin/bash
# run 216 (H200): F = ca8a255 (the final code of the 2026-11-29 third session; all head dims,
# sm_80 + sm_90a). The whole GPU suite and attn-candle's CUDA tests (they never ran on it);
# the forward's standing (bench large, both dtypes, SDPA) with SM clocks and power logged, and
# the f16 4,16,4096,128 samples under each Hopper schedule (the bimodal timings of run 170);
# train-bench with SDPA; per-kernel times of one backward under ncu.
set -u
N=216; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 240 F/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
export LD_LIBRARY_PATH="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
s=$(date +%s); timeout 60 F/candle --ignored --test-threads 1 > $R/candle.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/candle.log
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 > $R/smi.csv 2>&1 &
SMI=$!
s=$(date +%s); timeout 120 F/xtask bench --shapes large --dtype both --samples 200 --out-dir $R/bench_large > $R/bench_large.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/bench_large.log
for sch in grid persistent auto; do
  s=$(date +%s); timeout 60 F/xtask bench --shape 4,16,4096,128 --dtype f16 --samples 300 --no-sdpa --schedule $sch --out-dir $R/bench_$sch > $R/bench_$sch.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/bench_$sch.log
done
kill $SMI
s=$(date +%s); timeout 90 F/xtask train-bench --shapes "4,16,4096,128;2,16,8192,128" --iters 10 --varlen-seqs 0 > $R/train.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train.log
s=$(date +%s); timeout 90 ncu --metrics gpu__time_duration.sum --launch-count 60 F/xtask train-bench --shapes "4,16,4096,128" --python none --warmup 0 --iters 1 --varlen-seqs 0 > $R/ncu_times.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ncu_times.log
