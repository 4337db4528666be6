#!/bin/bash
# run 137: the final build (D = 160 / 192 default to the 96-key ping-pong tile; all head dims, sm_80 + sm_90a): the whole GPU suite; D = 64 causal on four tiles (xtask bench --no-sdpa, two rounds); the seed shapes against SDPA (f16).
set -u
N=137; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 420 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$?" >> $R/suite.log
for i in 1 2; do
for s in 4,16,4096,64 2,16,8192,64; do for d in bf16 f16; do for t in wg192_128_s2_pp_ia wg128_128_s2_pp_ia wg128_128_s3 wg128_176_s2_pp_ia; do
timeout 60 N/xtask bench --shape $s --causal bottom-right --dtype $d --no-sdpa --samples 200 --config $t --out-dir /tmp/b137 > $R/b_${s}_${d}_${t}_$i.log 2>&1
done; done; done; done
timeout 200 N/xtask bench --shapes seed --dtype f16 --out-dir $R/seed > $R/seed.log 2>&1; echo "rc=$?" >> $R/seed.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
