#!/bin/bash
# run 272 (H200): where run 271's fused dQ conversion loses time. One build, four arms by
# environment (experiment switches, not landed): pass = the dQ pass (one writer, no count);
# mode 3 = two writers that wait for each reduce to complete, no count, dQ pass; mode 2 = as 3
# plus the acq_rel count and the queue, the converting warp converts nothing, dQ pass;
# fused = run 271's full conversion. train-bench --plain, two rounds.
set -u
N=272; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
SH="4,16,4096,128;4,16,4096,64"
for i in 1 2; do
  s=$(date +%s); ATTN_EXP_DQ_PASS=1 timeout 90 N/xtask train-bench --plain --shapes "$SH" --iters 20 --varlen-seqs 0 --python none > $R/train_pass_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_pass_$i.log
  for m in 3 2; do
    s=$(date +%s); ATTN_EXP_DQ_MODE=$m timeout 90 N/xtask train-bench --plain --shapes "$SH" --iters 20 --varlen-seqs 0 --python none > $R/train_mode${m}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_mode${m}_$i.log
  done
  s=$(date +%s); timeout 90 N/xtask train-bench --plain --shapes "$SH" --iters 20 --varlen-seqs 0 --python none > $R/train_fused_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_fused_$i.log
done
