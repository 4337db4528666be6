#!/bin/bash
# run 273 (H200): N = 9ccf… + softcap's fixed softmax maximum in the Hopper forward's feature
# entries (score_mod.cuh softcap_bounded_max, OnlineSoftmax::update_scores_bounded), sm_90a,
# every head dim. ATTN_EXP_ONLINE_MAX=1 (an experiment switch through FwdFeatures' padding,
# not landed) makes the same binary run the online maximum. Feature and sequence tests, then
# train-bench (bf16, softcap 30) alternating the two arms, two rounds.
set -u
N=273; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 240 N/gpu --ignored features > $R/tests_features.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_features.log
SH="4,16,4096,128;4,16,4096,64"
for i in 1 2; do
  s=$(date +%s); ATTN_EXP_ONLINE_MAX=1 timeout 120 N/xtask train-bench --shapes "$SH" --iters 20 --varlen-seqs 0 --python none > $R/train_online_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_online_$i.log
  s=$(date +%s); timeout 120 N/xtask train-bench --shapes "$SH" --iters 20 --varlen-seqs 0 --python none > $R/train_bounded_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_bounded_$i.log
done
s=$(date +%s); timeout 200 N/gpu --ignored seqs > $R/tests_seqs.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_seqs.log
