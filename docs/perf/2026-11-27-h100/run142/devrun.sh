#!/bin/bash
# run 142: the final build (the causal regrouping skipped where groups have one pair; all head dims, sm_80 + sm_90a): the whole GPU suite; prev (3802372, pack140's N) vs N on causal D = 128 (three rounds) and D = 64 (two rounds), xtask bench --no-sdpa, bf16.
set -u
N=142; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P/prev /tmp/p140x; tar xJf target/pack$N.txz -C $P; tar xJf target/pack140.txz -C /tmp/p140x; cp /tmp/p140x/N/xtask $P/prev/xtask; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 420 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$?" >> $R/suite.log
for i in 1 2 3; do
for s in 4,16,4096,128 1,16,16384,128 4,16,4096,64; do for b in prev N; do
timeout 60 $b/xtask bench --shape $s --causal bottom-right --dtype bf16 --no-sdpa --samples 200 --out-dir /tmp/b142 > $R/b_${s}_${b}_$i.log 2>&1
done; done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
