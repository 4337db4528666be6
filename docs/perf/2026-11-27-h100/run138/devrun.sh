#!/bin/bash
# run 138: D = 64's small-grid tile (the wave model's "narrow" choice, today the 128-row three-stage tile without overlap) against the 128-row tiles with overlap / ping-pong and the 192-row default, on the seed shapes (xtask bench --no-sdpa, f16, two rounds; build of run 137).
set -u
N=138; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack137.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $R/date.txt
for i in 1 2; do
for sc in 1,8,512,64:none 1,8,512,64:bottom-right 2,8,512,64:none 2,8,2048,64:none 2,8,2048,64:bottom-right 8,16,1024,64:none; do
s=${sc%:*}; c=${sc#*:}
for t in wg128_128_s3 wg128_128_s2_pp_ia wg128_128_s2_ia wg128_128_s3_ia wg192_128_s2_pp_ia; do
timeout 60 N/xtask bench --shape $s --causal $c --dtype f16 --no-sdpa --config $t --out-dir /tmp/b138 > $R/b_${s}_${c}_${t}_$i.log 2>&1
done; done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
