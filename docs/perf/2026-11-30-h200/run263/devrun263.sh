#!/bin/bash
# run 263 (H200): N = 91e90a0 + the wgmma backward's 80-query blocks at D = 128 (FlashAttention-3's
# hdim-128 tile: dQᵀ = Kᵀ·dSᵀ, dS through stmatrix.trans, one dQ staging buffer), sm_90a, every
# head dim; B = the base build (same backward kernel as 91e90a0). Backward tests on N, then
# train-bench at D = 128 alternating B and N, two rounds; then N against SDPA (cuDNN) once.
set -u
N=263; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; tar xJf target/base263.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 240 N/gpu --ignored backward > $R/tests_backward.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_backward.log
for i in 1 2; do
  for b in base N; do
    s=$(date +%s); timeout 90 $b/xtask train-bench --shapes "4,16,4096,128;2,16,8192,128" --iters 20 --varlen-seqs 0 --python none > $R/train_${b}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$i.log
  done
done
s=$(date +%s); timeout 120 N/xtask train-bench --shapes "4,16,4096,128;1,16,16384,128" --iters 20 --varlen-seqs 0 > $R/train_N_sdpa.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_N_sdpa.log
