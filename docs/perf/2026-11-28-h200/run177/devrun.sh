#!/bin/bash
# run 177 (H200): the mma.sync backward's instruction diet (LSE/Δ by cp.async with the tile, counted walk, interior blocks without per-score tests, untested dQ additions at immediate offsets) against HEAD 57355b2 (base): train-bench 3 rounds alternating, one round with SDPA; the backward tests on N (64/128 sm_90a build: units of other buckets are absent).
set -u
N=177; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack177.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
SH="4,16,4096,128;4,16,4096,64;2,16,8192,128"
for i in 1 2 3; do for b in base N; do
  timeout 100 $b/xtask train-bench --shapes "$SH" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1; echo "rc=$?" >> $R/train_${b}_$i.log
done; done
timeout 150 N/xtask train-bench --shapes "4,16,4096,128;4,16,4096,64" --iters 10 --varlen-seqs 0 > $R/train_N_sdpa.log 2>&1; echo "rc=$?" >> $R/train_N_sdpa.log
cd N
for t in backward::correctness_backward_seed_shapes_and_masks backward::correctness_backward_tails_gqa_and_head_dims backward::determinism_backward_deterministic_mode_is_bitwise_reproducible backward_general::correctness_backward_features backward_general::correctness_backward_varlen backward_general::determinism_backward_general_is_bitwise_reproducible; do
  s=$(date +%s); timeout 120 ./gpu --ignored --exact $t --test-threads 1 > $R/test_${t##*::}.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/test_${t##*::}.log
done
tar czf $OUT/logs$N.tgz -C /tmp r$N
