#!/bin/bash
# run 237 (H200): per-warp clock timelines of the Hopper forward (experiment build: ATTN_TL in
# fwd_hopper_kernel.cuh, on 48d8283's kernels, D = 128, sm_90a): CTAs 0-3 of the first launch
# print, per warp and key tile, %clock at each phase of the intra-warpgroup loop (consumers),
# at each wait of the TMA thread and of FP8's transposing warps; the 40th launch of each
# (FP8, ping-pong, features) kind in its process (bench's sustained warm-up); softcap through
# the experiment's ATTN_EXP_SOFTCAP in bench.
set -u
N=237; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > $R/smi.txt
S=4,16,4096,128
b() { timeout 60 X/xtask bench --shape $S --no-sdpa --samples 3 --warmup 1 --out-dir $R/b "$@"; }
b --dtype f16 > $R/f16_default.txt 2>&1
b --dtype f16 --config wg128_128_s2_ia > $R/f16_128_ia.txt 2>&1
b --dtype f16 --config wg128_176_s2_pp_ia > $R/f16_176_pp_ia.txt 2>&1
b --dtype f16 --causal top-left > $R/f16_causal.txt 2>&1
b --fp8 hopper --fp8-config wg128_192_s2_ia > $R/fp8_192_ia.txt 2>&1
b --fp8 hopper --fp8-config wg128_192_s2_ia --schedule grid > $R/fp8_192_ia_grid.txt 2>&1
b --fp8 hopper --fp8-config wg128_192_s2_pp_ia > $R/fp8_192_pp_ia.txt 2>&1
ATTN_EXP_SOFTCAP=30 b --dtype f16 > $R/f16_softcap.txt 2>&1
ATTN_EXP_SOFTCAP=30 b --dtype f16 --causal top-left > $R/f16_softcap_causal.txt 2>&1
b --fp8 hopper --fp8-config wg128_192_s2_ia --causal top-left > $R/fp8_192_ia_causal.txt 2>&1
ls -la $R
