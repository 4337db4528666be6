#!/bin/bash
# run 347 (H200): N = the final code (run 344's kernels; the key-split tiles emulated with one
# state per consumer, `hopper::hopper_key_states`). (1) Run 346's failing seed of
# `hopper::correctness_hopper_every_tile_every_head_dim` on O (run 344's binary, the one-state
# emulation) and on N. (2) The whole GPU suite on N. (3) Three fresh seeds of the every-tile test.
set -u
N=347; R=/tmp/r$N
mkdir -p $R /tmp/pN /tmp/pO; tar xJf target/pack347.txz -C /tmp/pN; tar xJf target/pack344.txz -C /tmp/pO
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
T=hopper::correctness_hopper_every_tile_every_head_dim
ATTN_TEST_SEED=12055225938951856919 t replay_O 90 /tmp/pO/344/gpu --ignored --exact $T
ATTN_TEST_SEED=12055225938951856919 t replay_N 90 /tmp/pN/347/gpu --ignored --exact $T
t suite 280 /tmp/pN/347/gpu --ignored
for i in 1 2 3; do t seed_$i 90 /tmp/pN/347/gpu --ignored --exact $T; done
exit 0
