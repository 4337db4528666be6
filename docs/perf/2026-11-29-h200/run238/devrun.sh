#!/bin/bash
# run 238 (H200): the softmax's exponentials and row sums in three code shapes (kernels/softmax.cuh,
# OnlineSoftmax::update_scores), builds of D = 64 and 128 for sm_90a:
#   O  = 48d8283 (each p added to one row sum as it is made);
#   V5 = groups of four n-tiles: their exponentials, then their sums as a tree;
#   V3 = every p first (a quarter of them, n-tiles n % 4 == 3, by a degree-3 polynomial on
#        the FMA pipe), then four partial sums per row.
# Two rounds alternating O, V5, V3: bench (f16, bf16, FP8 at 4,16,4096,128; D = 64; the walking
# 176-key tile at 1,16,16384,128; causal), train-bench (softcap / ALiBi / window over plain).
set -u
N=238; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
for r in 1 2; do
  for b in O V5 V3; do
    timeout 60 $b/xtask bench --shape 4,16,4096,128 --dtype both --fp8 hopper --samples 100 --no-sdpa --out-dir $R/s > $R/${b}_128_$r.log 2>&1
    timeout 60 $b/xtask bench --shape 4,16,4096,64 --dtype both --samples 100 --no-sdpa --out-dir $R/s > $R/${b}_64_$r.log 2>&1
    timeout 60 $b/xtask bench --shape 4,16,4096,128 --causal top-left --dtype bf16 --samples 100 --no-sdpa --out-dir $R/s > $R/${b}_128c_$r.log 2>&1
    timeout 60 $b/xtask bench --shape 1,16,16384,128 --dtype bf16 --samples 50 --no-sdpa --out-dir $R/s > $R/${b}_16k_$r.log 2>&1
    timeout 120 $b/xtask train-bench --shapes "4,16,4096,128;4,16,4096,64" --iters 10 --varlen-seqs 0 --python none > $R/${b}_train_$r.log 2>&1
  done
done
rm -rf $R/s
grep -h "ours median" $R/*_1.log $R/*_2.log | head -0
