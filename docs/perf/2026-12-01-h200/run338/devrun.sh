#!/bin/bash
# run 338 (H200): N as run 337. Causal grids of at most half the SMs in 128-row blocks, where
# today's rule (kv_split_pays) already takes the key-split tile: is it right for causal
# launches (run 336/337: f16 D = 128's key split lost on every causal grid of one wave)?
# Default (the key split) against the 128-row tiles pinned (f16 `wg128_128_s2_pp_ia`; FP8
# D = 64 `wg128_128_s2_pp_ia`, D = 128 the causal default `wg128_192_s2_pp_ia`); and the
# threshold between S = 512 (key split lost at one wave) and 768 (won): 1,16,640 and
# 1,24,640 with the key split pinned. Two rounds.
set -u
N=338; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/packN.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
B="--causal bottom-right --fp8 hopper --no-sdpa --sustain-ms 300 --samples 150"
for i in 1 2; do
  for s in 1,8,512 2,8,512 1,16,512 1,8,1024 1,4,2048 1,2,4096 1,8,640; do
    for d in 64 128; do
      sh=$s,$d
      if [ $d = 64 ]; then f8=wg128_128_s2_pp_ia; else f8=wg128_192_s2_pp_ia; fi
      t k_${i}_${sh}_def 30 N/xtask bench --shape $sh $B --out-dir $R/o_${i}_${sh}_def
      t k_${i}_${sh}_pp 30 N/xtask bench --shape $sh $B --config wg128_128_s2_pp_ia --fp8-config $f8 --out-dir $R/o_${i}_${sh}_pp
    done
  done
  for s in 1,16,640 1,24,640; do
    for d in 64 128; do
      sh=$s,$d
      if [ $d = 64 ]; then kv=wg64_128_s4_ia_kv; else kv=wg64_64_s4_ia_kv; fi
      t k_${i}_${sh}_def 30 N/xtask bench --shape $sh $B --out-dir $R/o_${i}_${sh}_def
      t k_${i}_${sh}_kv 30 N/xtask bench --shape $sh $B --config $kv --fp8-config $kv --out-dir $R/o_${i}_${sh}_kv
    done
  done
done
