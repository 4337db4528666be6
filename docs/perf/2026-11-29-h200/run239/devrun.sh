#!/bin/bash
# run 239 (H200): (a) the softmax microbenchmark with scheduling fences (target/mb/mufu.cu,
# modes 14-16: every ex2 issued before any row-sum addition); (b) the 128-key D = 128 tiles as
# walking (persistent) entries, so the stream-K tail applies at 4,16,4096,128: W = walking
# 128-key tiles, WH = W + a suspend-time hint on the producer's free-slot waits, O = 48d8283.
set -u
N=239; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
date -u > $R/date.txt
(cd target/mb && nvcc -std=c++17 --use_fast_math -O3 -arch=sm_90a -o /tmp/mufu mufu.cu && /tmp/mufu) > $R/mufu.log 2>&1
cd $P
timeout 150 W/gpu --ignored schedule::correctness_persistent schedule::correctness_stream_k > $R/tests_W.log 2>&1; echo "rc=$?" >> $R/tests_W.log
timeout 150 WH/gpu --ignored schedule::correctness_persistent schedule::correctness_stream_k > $R/tests_WH.log 2>&1; echo "rc=$?" >> $R/tests_WH.log
for r in 1 2; do
  for b in O W WH; do
    timeout 60 $b/xtask bench --shape 4,16,4096,128 --dtype both --samples 200 --no-sdpa --out-dir $R/s > $R/${b}_128_$r.log 2>&1
  done
  timeout 60 W/xtask bench --shape 4,16,4096,128 --dtype both --samples 200 --no-sdpa --schedule grid --out-dir $R/s > $R/Wgrid_128_$r.log 2>&1
  timeout 60 W/xtask bench --shape 4,16,4096,128 --dtype both --samples 200 --no-sdpa --schedule persistent --out-dir $R/s > $R/Wpers_128_$r.log 2>&1
done
rm -rf $R/s
