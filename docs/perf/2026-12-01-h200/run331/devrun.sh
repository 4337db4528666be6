#!/bin/bash
# run 331 (H200): N = main 9e8ecf7 + the grid model (longest-first makespan for causal launches
# in the D = 64 tile choice, catalog::grid_cost). (1) The whole GPU suite on N. (2) The D = 64
# causal tile pair pinned (f16/bf16 192-row `wg192_128_s2_pp_ia` against 128-row
# `wg128_128_s2_pp_ia`; FP8 `wg192_128_s2_ia` against `wg128_128_s2_pp_ia`), f16 and FP8 in
# one call, on shapes where the grid and wave models disagree, two rounds.
set -u
N=331; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/packN.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
for i in 1 2; do
  for sh in 8,16,1024,64 4,16,1024,64 16,32,1024,64 1,16,1536,64 2,8,4096,64 1,16,4096,64; do
    t b_${i}_${sh}_192 30 N/xtask bench --shape $sh --causal bottom-right --config wg192_128_s2_pp_ia --fp8 hopper --fp8-config wg192_128_s2_ia --no-sdpa --sustain-ms 300 --samples 150 --out-dir $R/o_${i}_${sh}_192
    t b_${i}_${sh}_128 30 N/xtask bench --shape $sh --causal bottom-right --config wg128_128_s2_pp_ia --fp8 hopper --fp8-config wg128_128_s2_pp_ia --no-sdpa --sustain-ms 300 --samples 150 --out-dir $R/o_${i}_${sh}_128
  done
done
t suite 300 N/gpu --ignored
