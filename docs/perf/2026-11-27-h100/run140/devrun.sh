#!/bin/bash
# run 140: causal launch order. Today a causal grid runs each (head, batch)'s query blocks longest first, head after head. G8: longest first across groups of 8 (head, batch) pairs; GALL: across all of them. xtask bench --no-sdpa, bf16, two rounds alternating, against the landed build (N = 3802372).
set -u
N=140; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $R/date.txt
for i in 1 2; do
for s in 4,16,4096,64 2,16,8192,64 4,16,4096,128 8,16,2048,128 1,16,16384,128; do for b in N G8 GALL; do
timeout 60 $b/xtask bench --shape $s --causal bottom-right --dtype bf16 --no-sdpa --samples 200 --out-dir /tmp/b140 > $R/b_${s}_${b}_$i.log 2>&1
done; done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
