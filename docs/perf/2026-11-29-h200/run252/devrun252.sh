#!/bin/bash
# run 252 (H200): run 251's build (db5e547, sm_90a, every head dim) with the test fix for the
# trimmed catalog: `correctness_hopper_every_tile_every_head_dim`, whose run-count floor (3
# tiles per head dim) stopped it in run 251 before it reported its 288 cases.
set -u
N=252; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 300 L/gpu --ignored hopper:: > $R/tests_hopper.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_hopper.log
