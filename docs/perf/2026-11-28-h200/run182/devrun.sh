#!/bin/bash
# run 182 (H200): the landing build F (679eaa7) against base (57355b2): train-bench base (57355b2) / F, two rounds alternating (mma.sync engine, deterministic included); F with SDPA's backends in the same process; replays of run 181's two tolerance misses (ATTN_TEST_SEED) on F and on base's test binary B (57355b2, D = 64 units only), three times each for the backward one (its dQ additions are unordered).
set -u
N=182; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack177.txz -C $P; rm -rf $P/N; tar xJf target/pack181.txz -C $P; tar xJf target/pack182.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
SH="4,16,4096,128;4,16,4096,64;2,16,8192,128"
for i in 1 2; do for b in base F; do
  timeout 100 $b/xtask train-bench --shapes "$SH" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1; echo "rc=$?" >> $R/train_${b}_$i.log
done; done
timeout 150 F/xtask train-bench --shapes "$SH" --iters 10 --varlen-seqs 0 > $R/train_F_sdpa.log 2>&1; echo "rc=$?" >> $R/train_F_sdpa.log
for i in 1 2 3; do for b in F B; do
  ATTN_TEST_SEED=4033457526796449321 timeout 60 $b/gpu --ignored --exact backward::correctness_backward_tails_gqa_and_head_dims --test-threads 1 > $R/seed_bwd_${b}_$i.log 2>&1; echo "rc=$?" >> $R/seed_bwd_${b}_$i.log
done; done
for b in F B; do
  ATTN_TEST_SEED=16833604244604745215 timeout 90 $b/gpu --ignored --exact hopper::correctness_hopper_every_tile_every_head_dim --test-threads 1 > $R/seed_hopper_${b}.log 2>&1; echo "rc=$?" >> $R/seed_hopper_${b}.log
done
tar czf $OUT/logs$N.tgz -C /tmp r$N
