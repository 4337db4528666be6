#!/bin/bash
# run 195 (H200): the final build (797b9e3): FP8 D = 64 tiles with the in-kernel transpose,
# both masks, two rounds (the three-consumer 192-row tiles were last measured with the Vᵀ pass).
set -u
N=195; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack194.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for i in 1 2; do
  for cfg in wg128_192_s2_ia wg192_128_s2_pp_ia wg192_128_s3 wg192_128_s2_ia wg128_128_s2_pp_ia; do for c in none bottom-right; do
    timeout 40 B/xtask bench --shape 4,16,4096,64 --causal $c --dtype f16 --fp8 hopper --fp8-config $cfg --samples 100 --no-sdpa --out-dir $R/d64_${cfg}_${c}_$i > $R/d64_${cfg}_${c}_$i.log 2>&1
  done; done
done
