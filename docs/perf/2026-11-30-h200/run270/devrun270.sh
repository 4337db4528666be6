#!/bin/bash
# run 270 (H200): N = b3ba8b1 + the wgmma backward's fused dQ conversion (plain entries, default
# mode, D = 64 / 128: the last adder per query block converts it; no dQ pass), sm_90a, every
# head dim. ATTN_EXP_DQ_PASS=1 (an experiment switch, not landed) makes the same build run the
# dQ pass instead, so both arms share one binary. Backward tests, train-bench --plain A/B in two
# rounds, one call against SDPA, compute-sanitizer on the small backward set.
set -u
N=270; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 300 N/gpu --ignored backward > $R/tests_backward.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_backward.log
SH="4,16,4096,128;4,16,4096,64;1,16,16384,128"
for i in 1 2; do
  s=$(date +%s); ATTN_EXP_DQ_PASS=1 timeout 90 N/xtask train-bench --plain --shapes "$SH" --iters 20 --varlen-seqs 0 --python none > $R/train_pass_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_pass_$i.log
  s=$(date +%s); timeout 90 N/xtask train-bench --plain --shapes "$SH" --iters 20 --varlen-seqs 0 --python none > $R/train_fused_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_fused_$i.log
done
s=$(date +%s); timeout 120 N/xtask train-bench --plain --shapes "4,16,4096,128;1,16,16384,128" --iters 20 --varlen-seqs 0 > $R/train_fused_sdpa.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_fused_sdpa.log
for tool in memcheck racecheck synccheck; do
  s=$(date +%s); timeout 120 compute-sanitizer --tool $tool N/gpu --ignored sanitize_backward_small > $R/san_$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/san_$tool.log
done
