#!/bin/bash
# run 136: build 346a5df (all head dims, sm_80 + sm_90a; every D = 128 launch off the wide tile on the 128-key ping-pong tile): the whole GPU suite; an A/B of the D = 96 / 160 / 192 defaults (no ping-pong) against the same tiles with ping-pong (xtask bench --no-sdpa, bf16, two rounds); the large shapes against SDPA (f16 and bf16).
set -u
N=136; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 420 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$?" >> $R/suite.log
for i in 1 2; do
for sc in 4,16,4096,96:none 4,16,4096,96:bottom-right 2,8,512,96:none 2,16,4096,160:none 4,16,4096,192:none 4,16,4096,192:bottom-right 2,8,512,192:none; do
s=${sc%:*}; c=${sc#*:}; d=${s##*,}; bn=128; [ $d -gt 128 ] && bn=96
for t in wg128_${bn}_s2_ia wg128_${bn}_s2_pp_ia; do
timeout 60 N/xtask bench --shape $s --causal $c --dtype bf16 --no-sdpa --samples 200 --config $t --out-dir /tmp/b136 > $R/b_${s}_${c}_${t}_$i.log 2>&1
done; done; done
timeout 300 N/xtask bench --shapes large --dtype both --samples 100 --out-dir $R/large > $R/large.log 2>&1; echo "rc=$?" >> $R/large.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
