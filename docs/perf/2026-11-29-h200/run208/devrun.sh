#!/bin/bash
# run 208 (H200): A = d6aaaa4 (run 206's D); F = A + paged Hopper launches take the wide
# 176-key tile only where its TMA boxes (gcd(BN, page)) are as tall as the 128-key tile's, and
# serve-bench's varlen set with both tiles at every page size. serve-bench A/F alternating;
# F's seqs:: and features:: GPU tests.
set -u
N=208; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for b in A F A F; do
  s=$(date +%s); timeout 55 $b/xtask serve-bench --json $R/serve_$b.json >> $R/serve_$b.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve_$b.log
done
s=$(date +%s); timeout 150 F/gpu --ignored seqs:: features:: > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
