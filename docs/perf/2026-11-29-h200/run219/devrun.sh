#!/bin/bash
# run 219 (H200): N = d0cdcdc (the faster backward row passes) + bench's sustained warm-up (every
# event-timed shape launches for >= 0.5 s before its samples, both sides) + train-bench's
# training-step timing for the SDPA comparison. The standing: bench large (both dtypes, SDPA)
# with clocks and power logged; train-bench with SDPA.
set -u
N=219; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 > $R/smi.csv 2>&1 &
SMI=$!
s=$(date +%s); timeout 200 N/xtask bench --shapes large --dtype both --samples 200 --out-dir $R/bench_large > $R/bench_large.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/bench_large.log
kill $SMI
s=$(date +%s); timeout 200 N/xtask train-bench --shapes "4,16,4096,128;2,16,8192,128;4,16,4096,64;4,16,4096,256" --iters 20 --varlen-seqs 16 --json $R/train.json > $R/train.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train.log
