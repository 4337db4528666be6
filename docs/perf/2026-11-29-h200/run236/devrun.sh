#!/bin/bash
# run 236 (H200): N = the suspend-time hint on every mbarrier wait (kernels/tma.cuh; uncommitted,
# on 636dc2e's kernels): the Hopper forward, FP8 forward and wgmma backward. O = 636dc2e. GPU
# tests (hopper, schedule, backward groups) on N; A/B O vs N, alternating, two rounds: bench
# 4,16,4096,128 (both dtypes and FP8) and 1,16,16384,128 (the walking 176-key tile); ncu at
# locked clocks; train-bench's backward at 4,16,4096,128.
set -u
N=236; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
s=$(date +%s); timeout 120 N/gpu --ignored hopper schedule backward > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
for r in 1 2; do
  for b in O N; do
    timeout 40 $b/xtask bench --shape 4,16,4096,128 --dtype both --fp8 hopper --samples 200 --no-sdpa --out-dir $R/${b}_4096_$r > $R/${b}_4096_$r.log 2>&1
    timeout 40 $b/xtask bench --shape 1,16,16384,128 --dtype both --samples 200 --no-sdpa --out-dir $R/${b}_16k_$r > $R/${b}_16k_$r.log 2>&1
  done
done
for b in O N; do
  ncu --metrics gpu__time_duration.sum -k regex:attn_fwdh --launch-count 4 $b/xtask bench --shape 4,16,4096,128 --dtype bf16 --no-sdpa --samples 3 --warmup 1 > $R/ncu_$b.log 2>&1
done
for b in O N; do
  timeout 40 $b/xtask train-bench --shapes "4,16,4096,128" --iters 10 --varlen-seqs 0 --python none > $R/train_$b.log 2>&1
done
