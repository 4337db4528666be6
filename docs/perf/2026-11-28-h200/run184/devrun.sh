#!/bin/bash
# run 184 (H200): F3 = 7f736dc (the backward workspace's regions 16-byte aligned; kernels as F): the odd-row case on F (679eaa7) and F3 through train-bench (1,3,17,96: B·Hq·Sq = 51, the mma.sync engine on sm_90), memcheck on F3's; F3's whole GPU suite (with the new odd-row backward cases).
set -u
N=184; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack181.txz -C $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for b in F F3; do
  timeout 60 $b/xtask train-bench --shapes "1,3,17,96;1,3,17,64" --python none --warmup 1 --iters 2 --varlen-seqs 0 > $R/odd_$b.log 2>&1; echo "rc=$?" >> $R/odd_$b.log
done
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 F3/xtask train-bench --shapes "1,3,17,96;1,3,17,64" --python none --warmup 0 --iters 1 --varlen-seqs 0 > $R/odd_F3_memcheck.log 2>&1; echo "rc=$?" >> $R/odd_F3_memcheck.log
s=$(date +%s); timeout 280 F3/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
