#!/bin/bash
# run 283 (H200): the forward's split tail (one-item-per-CTA dense non-causal f16/bf16 entries):
# the whole GPU suite (the new schedule test among it), then bench Auto against Grid, alternating.
set -u
N=283; # bench rerun (the first call had a wrong flag)
 R=/tmp/r${N}b; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r${N}b' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
#s=$(date +%s); timeout 120 N/gpu --ignored correctness_tail_pieces > $R/tail_test.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tail_test.log
#s=$(date +%s); timeout 240 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
for round in 1 2; do
  for shape in 4,16,4096,64 4,16,4096,128 4,16,4096,256; do
    for sch in grid auto; do
      timeout 40 N/xtask bench --shape $shape --dtype bf16 --no-sdpa --samples 100 --schedule $sch --out-dir $R/b > $R/bench_${shape}_${sch}_$round.log 2>&1
    done
  done
done
rm -rf $R/b/samples
