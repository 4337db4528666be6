#!/bin/bash
# run 249 (H200): the mma.sync backward's deterministic turns after run 248's ncu (B3's wait
# for thread 0's poll, and every warp stalling behind its own dQ atomics at the pass's
# predicated ERRBAR and the SEL that reuses an atomic's address register). V1 = B0 with the
# pass in a warp-uniform branch (warps 1-7 skip it); V2 = V1 + the turn read relaxed before
# phase C and fence.acq_rel on a hit (spin otherwise), the additions as explicit `red` PTX;
# V3 = V2 + the walk rotated by k = Q / N query blocks per key block (non-causal plain) and
# the pass deferred to the next block's wait (plain launches, rotated or causal).
# V3's backward tests (filtered build: failures that say "not built" are not results), then
# train-bench (no SDPA) at 4,16,4096,64 and 4,16,4096,128, alternating, two rounds.
set -u
N=249; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 200 V3/gpu --ignored backward > $R/tests_V3.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_V3.log
for i in 1 2; do
  for b in B0 V1 V2 V3; do
    s=$(date +%s); timeout 100 $b/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128" --iters 20 --varlen-seqs 0 --python none --json $R/train_${b}_$i.json > $R/train_${b}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$i.log
  done
done
