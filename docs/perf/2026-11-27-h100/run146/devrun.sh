#!/bin/bash
# run 146 (experiment): D = 128 wgmma backward adding dQ from registers (no staging, no writer) with three Q/dO stages, against the base (82881ea), train-bench --python none, alternating, twice.
set -u
N=146; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for i in 1 2; do for b in base N; do
timeout 120 $b/xtask train-bench --shapes "4,16,4096,128;2,16,8192,128" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1
done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
