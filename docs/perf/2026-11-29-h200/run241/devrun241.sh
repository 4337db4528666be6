#!/bin/bash
# run 241 (H200): three consumer warpgroups at D = 128 (experiment tree W3 = 19ba87e plus
# ht3 tiles in catalog.rs: FP8 wg192_96_s2_ia / _pp_ia, wg192_128_s2_pp / s2; f16
# wg192_128_s2_pp / s2, wg192_96_s2_pp_ia). Correctness of every tile; the new small walking /
# stream-K test under racecheck, memcheck, synccheck; then bench, two rounds.
set -u
N=241; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
timeout 200 W/gpu --ignored --nocapture hopper::correctness_hopper_every_tile fp8::correctness_fp8_every_config > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log
run() { # name, args...
  local n=$1; shift
  timeout 30 W/xtask bench "$@" --samples 100 --no-sdpa --out-dir $R/o_$n > $R/$n.log 2>&1
  echo "$n $(grep -h '^|' $R/$n.log | grep -v -- '---' | tail -n +2 | awk -F'|' '{print $2, $5}' | tr '\n' ' ')" >> $R/summary.txt
}
for i in 1 2; do
  for c in wg128_192_s2_ia wg192_96_s2_ia wg192_96_s2_pp_ia wg192_128_s2_pp wg192_128_s2; do
    run fp8_${c}_$i --shape 4,16,4096,128 --dtype f16 --fp8 hopper --fp8-config $c
  done
  for c in wg128_192_s2_pp_ia wg192_96_s2_pp_ia wg192_128_s2_pp; do
    run fp8c_${c}_$i --shape 4,16,4096,128 --causal bottom-right --dtype f16 --fp8 hopper --fp8-config $c
  done
  for c in wg128_128_s2_pp_ia wg192_128_s2_pp wg192_128_s2 wg192_96_s2_pp_ia; do
    run f16_${c}_$i --shape 4,16,4096,128 --dtype f16 --config $c
    run f16c_${c}_$i --shape 4,16,4096,128 --causal bottom-right --dtype f16 --config $c
  done
done
rm -rf $R/o_*/samples
for tool in racecheck memcheck synccheck; do
  t=90; [ $tool = racecheck ] && t=200
  timeout $t compute-sanitizer --tool $tool W/gpu --ignored --exact sanitize::sanitize_hopper_walks_and_stream_k_tails --test-threads 1 > $R/san_$tool.log 2>&1; echo "rc=$?" >> $R/san_$tool.log
done
