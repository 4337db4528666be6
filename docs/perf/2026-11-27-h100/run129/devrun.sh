#!/bin/bash
# run 129: backward.rs's tests compare against the emulation given our forward's O and LSE (backward_emulated_with, as backward_general.rs): all backward:: tests, and the one-row seed of runs 124-125 three times.
set -u
N=129; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $R/date.txt
timeout 240 N/gpu --ignored backward:: > $R/backward.log 2>&1; echo "rc=$?" >> $R/backward.log
for i in 1 2 3; do ATTN_TEST_SEED=7225464571772424255 timeout 100 N/gpu --ignored backward::correctness_backward_tails_gqa_and_head_dims > $R/seed_$i.log 2>&1; echo "rc=$?" >> $R/seed_$i.log; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
