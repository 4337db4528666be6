#!/bin/bash
# run 162: attn-ref's emulation takes the softcap's tanh in f32 (no 11-bit rounding; run 161 measured tanh.approx within 2^-16.5): the two seeds that missed the gradient rule replayed, then the whole GPU suite. Logs go straight to $OUT (the device budget is nearly spent).
set -u
N=162; R=$OUT/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
ATTN_TEST_SEED=4911349873347944647 timeout 60 N/gpu --ignored --exact backward_general::correctness_backward_features > $R/replay_features.log 2>&1; echo "rc=$?" >> $R/replay_features.log
ATTN_TEST_SEED=6714557127892243767 timeout 60 N/gpu --ignored --exact backward_general::correctness_backward_varlen > $R/replay_varlen.log 2>&1; echo "rc=$?" >> $R/replay_varlen.log
timeout 200 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$?" >> $R/suite.log
