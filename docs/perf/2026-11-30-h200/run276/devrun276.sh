#!/bin/bash
# run 276 (H200): the landing build of D = 256's paged tile (catalog::hopper_paged_tile: 64 keys,
# `_feat` entries only, for pages of 32+ keys), sm_90a, every head dim: the whole GPU suite,
# then serve-bench varlen + paged at D = 256.
set -u
N=276; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 320 N/gpu --ignored > $R/tests_all.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_all.log
s=$(date +%s); timeout 100 N/xtask serve-bench --only varlen --varlen-head-dim 256 > $R/serve_d256.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve_d256.log
