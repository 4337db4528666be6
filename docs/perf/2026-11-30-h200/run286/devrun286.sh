#!/bin/bash
# run 286 (H200): the small-smem forward test after Auto's fallback fix (a limited launcher
# runs mma.sync), the whole GPU suite, and train-bench --plain three times at D = 128 (the
# split tail against the grid: run 285 read it 1.2-1.5 % slower, runs 279-281 1-2 % faster).
set -u
N=286; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 60 N/gpu --ignored --exact small_smem::correctness_small_smem_forward_and_decode > $R/small.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/small.log
for i in 1 2 3; do
timeout 60 N/xtask train-bench --plain --shapes "4,16,4096,128;2,16,8192,128" --iters 20 --varlen-seqs 0 --python none > $R/tb_$i.log 2>&1; echo "rc=$?" >> $R/tb_$i.log
done
s=$(date +%s); timeout 260 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
