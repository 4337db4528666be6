#!/bin/bash
# run 330 (H200): (1) N = main 9e8ecf7 (FP8 causal grouped at every head dim): fp8::, the FP8
# persistent-walk schedule test, the four sanitizers on the FP8 small shapes. (2) E = N + softcap
# fused into the Hopper forward's softmax, one softmax copy (variant P: the tanh per score and
# on the row maximum under a warp-uniform flag, set on tiles no row masks when ALiBi is off):
# features:: on E, then train-bench (bf16, softcap 30) alternating N and E, two rounds.
set -u
N=330; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; for x in N E; do tar xJf target/pack$x.txz -C $P; done
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
t fp8 120 N/gpu --ignored fp8::
t sched_fp8 60 N/gpu --ignored --exact schedule::correctness_fp8_persistent_walks_match_one_cta_per_item
for tool in memcheck racecheck synccheck initcheck; do
  t san_$tool 90 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact sanitize::sanitize_fp8_small_shapes
done
t features_E 120 E/gpu --ignored features::
SH="4,16,4096,128;4,16,4096,64;4,16,4096,256"
for i in 1 2; do
  for b in N E; do t train_${b}_$i 150 $b/xtask train-bench --shapes "$SH" --iters 20 --varlen-seqs 0 --python none; done
done
