#!/bin/bash
# run 141: the landed causal order (9e20070; all head dims, sm_80 + sm_90a): the whole GPU suite; prev (3802372, pack140's N) vs N on causal shapes (xtask bench --no-sdpa, bf16, two rounds); 4,16,4096,64 causal against SDPA (f16, bf16).
set -u
N=141; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P/prev; tar xJf target/pack$N.txz -C $P; tar xJf target/pack140.txz -C /tmp/p140x 2>/dev/null || (mkdir -p /tmp/p140x && tar xJf target/pack140.txz -C /tmp/p140x); cp /tmp/p140x/N/xtask $P/prev/xtask; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 420 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$?" >> $R/suite.log
for i in 1 2; do
for s in 4,16,4096,64 2,16,8192,64 8,16,2048,64 4,16,4096,128; do for b in prev N; do
timeout 60 $b/xtask bench --shape $s --causal bottom-right --dtype bf16 --no-sdpa --samples 200 --out-dir /tmp/b141 > $R/b_${s}_${b}_$i.log 2>&1
done; done; done
timeout 120 N/xtask bench --shape 4,16,4096,64 --causal bottom-right --dtype both --out-dir /tmp/b141s > $R/sdpa_d64_causal.log 2>&1; echo "rc=$?" >> $R/sdpa_d64_causal.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
