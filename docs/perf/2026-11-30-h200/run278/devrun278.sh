#!/bin/bash
# run 278 (H200): run 276's build (HEAD's kernels). Does the wgmma backward lose a wave tail?
# 4,16,4096,128 = 2048 CTAs (15.52 rounds of 132), 2,33 = 2112 (16.00), 4,17 = 2176 (16.48).
set -u
N=278; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack276.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
for round in 1 2; do
  timeout 200 N/xtask train-bench --plain --shapes "4,16,4096,128;2,33,4096,128;4,17,4096,128;1,66,4096,128" --iters 20 --varlen-seqs 0 > $R/tb_$round.log 2>&1
  echo "rc=$?" >> $R/tb_$round.log
done
