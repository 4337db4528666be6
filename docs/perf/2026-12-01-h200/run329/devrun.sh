#!/bin/bash
# run 329 (H200): (1) N = main b4cc53c (3ecd69a's kernels; FP8 causal D = 128 grouped): fp8::, the
# FP8 persistent-walk schedule test, the four sanitizers on the FP8 small shapes; D = the same
# commit's debug-kernels build (D = 64/128): debug::. (2) E = N + softcap fused into the Hopper
# forward's softmax (tanh per score inside the exponential loop, the row maximum from the raw
# scores) + an experiment switch ATTN_EXP_LPT256 (FP8 causal grouping at D = 256): features::
# on E, then train-bench (bf16, softcap 30) alternating N and E, two rounds; FP8 causal
# D = 256 with and without the switch.
set -u
N=329; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; for x in N D E; do tar xJf target/pack$x.txz -C $P; done
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
t fp8 120 N/gpu --ignored fp8::
t sched_fp8 60 N/gpu --ignored --exact schedule::correctness_fp8_persistent_walks_match_one_cta_per_item
for tool in memcheck racecheck synccheck initcheck; do
  t san_$tool 90 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact sanitize::sanitize_fp8_small_shapes
done
t debug 90 D/gpu --ignored debug::
t features_E 120 E/gpu --ignored features::
SH="4,16,4096,128;4,16,4096,64"
for i in 1 2; do
  for b in N E; do t train_${b}_$i 120 $b/xtask train-bench --shapes "$SH" --iters 20 --varlen-seqs 0 --python none; done
done
for i in 1 2; do
  for sh in 4,16,4096,256 2,16,4096,256 1,16,8192,256; do
    t fp8c_N_${i}_$sh 30 E/xtask bench --shape $sh --causal bottom-right --fp8 hopper --no-sdpa --sustain-ms 300 --samples 150 --out-dir $R/o_N_${i}_$sh
    t fp8c_E_${i}_$sh 30 env ATTN_EXP_LPT256=1 E/xtask bench --shape $sh --causal bottom-right --fp8 hopper --no-sdpa --sustain-ms 300 --samples 150 --out-dir $R/o_E_${i}_$sh
  done
done
