#!/bin/bash
# run 134: plain causal D = 128 on the 128-key tile without (wg128_128_s2_ia, today's causal default) and with ping-pong (wg128_128_s2_pp_ia), bf16 and f16, four shapes, three rounds alternating (xtask bench --no-sdpa, N of pack133).
set -u
N=134; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack133.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $R/date.txt
for i in 1 2 3; do
for s in 4,16,4096,128 2,16,8192,128 1,16,16384,128 8,16,2048,128; do for d in bf16 f16; do for c in wg128_128_s2_ia wg128_128_s2_pp_ia; do
timeout 60 N/xtask bench --shape $s --causal bottom-right --dtype $d --no-sdpa --samples 200 --config $c --out-dir $R/b_${s}_${d}_${c}_$i > $R/b_${s}_${d}_${c}_$i.log 2>&1
done; done; done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
