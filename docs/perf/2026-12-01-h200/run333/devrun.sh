#!/bin/bash
# run 333 (H200): E = main 91e2e6d + softcap's row maximum from the raw scores in the Hopper
# forward's feature entries (score_mod.cuh features_mask_and_max; one softmax copy, the tanh
# pass kept separate): features:: on E, then train-bench (bf16, softcap 30) N, E, N, E.
# Logs straight under $OUT (the session's last device seconds: a timeout keeps them).
set -u
N=333; R=$OUT/r$N; P=/tmp/p$N
mkdir -p $R $P; for x in N E; do tar xJf target/pack$x.txz -C $P; done
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
t features_E 60 E/gpu --ignored features::
SH="4,16,4096,128;4,16,4096,64"
for i in 1 2; do
  for b in N E; do t train_${b}_$i 100 $b/xtask train-bench --shapes "$SH" --iters 10 --varlen-seqs 0 --python none; done
done
