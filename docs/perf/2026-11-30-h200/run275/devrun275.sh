#!/bin/bash
# run 275 (H200): is the paged prefill's cost at D = 256 the 80-key tile's 16-row TMA boxes?
# B = 30d1ab2 (the 80-key tile: boxes of gcd(80, page) = 16 rows), E = the same with D = 256's
# one Hopper tile at 64 keys (boxes of 16 / 64 / 64 rows for pages of 16 / 64 / 256; an
# experiment build, ATTN_HEAD_DIMS=256). serve-bench varlen + paged at D = 256, alternating,
# two rounds.
set -u
N=275; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
for i in 1 2; do
  for b in B E; do
    s=$(date +%s); timeout 120 $b/xtask serve-bench --only varlen --varlen-head-dim 256 > $R/serve_${b}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve_${b}_$i.log
  done
done
