#!/bin/bash
# run 222 (H200): the Hopper tiles' defaults re-timed at sustained clocks (bench's 0.5 s warm-up;
# the earlier sweeps had bimodal samples): f16 D = 128 (full, causal) and FP8 D = 64 causal,
# D = 128 (full, causal), D = 256; two rounds. xtask of run 219 (forward kernels as HEAD).
set -u
N=222; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack219.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
run() { # name, args...
  local n=$1; shift
  timeout 30 N/xtask bench "$@" --samples 200 --no-sdpa --out-dir $R/o_$n > $R/$n.log 2>&1
  echo "$n $(grep -h '^|' $R/$n.log | grep -v -- '---' | tail -n +2 | awk -F'|' '{print $2, $5}' | tr '\n' ' ')" >> $R/summary.txt
}
for i in 1 2; do
  for c in wg128_176_s2_pp_ia wg128_176_s2 wg128_128_s2_pp_ia wg128_128_s2_ia wg128_128_s3 wg128_128_s3_ia; do
    run f16_full_${c}_$i --shape 4,16,4096,128 --dtype f16 --config $c
  done
  for c in wg128_128_s2_pp_ia wg128_128_s2_ia wg128_176_s2_pp_ia; do
    run f16_causal_${c}_$i --shape 4,16,4096,128 --causal bottom-right --dtype f16 --config $c
  done
  for c in wg128_192_s2_ia wg128_192_s2_pp_ia wg128_224_s2_ia wg128_128_s2_ia wg128_128_s2_pp_ia; do
    run fp8_128_${c}_$i --shape 4,16,4096,128 --dtype f16 --fp8 hopper --fp8-config $c
  done
  for c in wg128_192_s2_pp_ia wg128_192_s2_ia wg128_128_s2_pp_ia; do
    run fp8_128c_${c}_$i --shape 4,16,4096,128 --causal bottom-right --dtype f16 --fp8 hopper --fp8-config $c
  done
  for c in wg192_128_s2_ia wg192_128_s2_pp_ia wg128_192_s2_ia wg128_128_s2_pp_ia; do
    run fp8_64c_${c}_$i --shape 4,16,4096,64 --causal bottom-right --dtype f16 --fp8 hopper --fp8-config $c
  done
  for c in wg128_96_s2_pp_ia wg128_96_s2_ia wg128_64_s2_ia; do
    run fp8_256_${c}_$i --shape 4,16,4096,256 --dtype f16 --fp8 hopper --fp8-config $c
  done
done
