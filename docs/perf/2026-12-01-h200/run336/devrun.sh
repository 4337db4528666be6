#!/bin/bash
# run 336 (H200): N = the tie-aware gradient rule (attn_ref TieSpread, RefGrads::rule_emulation).
# (1) The 99 KiB tile's case at its seed (passes now?), the backward tests (backward::,
# backward_general::), attn-candle's CUDA tests. (2) The key-split tile against the default on
# causal grids that fill one to four waves of 128-row blocks (f16 and FP8 in one call; default
# tiles unpinned, key split pinned), two rounds: the data for a grid-model key-split rule.
set -u
N=336; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/packN.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
export ATTN_TEST_DUMP_DIR=$R/dump
ATTN_TEST_SEED=8489930180045089453 t seed 60 N/gpu --ignored --exact backward::correctness_backward_99_kib_tile
t backward 240 N/gpu --ignored backward
[ -x N/candle ] && t candle 90 N/candle --ignored --test-threads 1
for i in 1 2; do
  for sh in 1,16,1024,128 2,16,1024,128 1,32,1024,128 4,16,1024,128 1,16,1536,128 1,16,2048,128 2,16,2048,128 1,8,4096,128 1,16,4096,128; do
    t k_${i}_${sh}_def 30 N/xtask bench --shape $sh --causal bottom-right --fp8 hopper --no-sdpa --sustain-ms 300 --samples 150 --out-dir $R/o_${i}_${sh}_def
    t k_${i}_${sh}_kv 30 N/xtask bench --shape $sh --causal bottom-right --config wg64_64_s4_ia_kv --fp8 hopper --fp8-config wg64_64_s4_ia_kv --no-sdpa --sustain-ms 300 --samples 150 --out-dir $R/o_${i}_${sh}_kv
  done
  for sh in 1,16,1024,64 2,16,1024,64 1,32,1024,64 4,16,1024,64 1,16,2048,64 2,16,2048,64 1,8,4096,64 1,16,4096,64; do
    t k_${i}_${sh}_def 30 N/xtask bench --shape $sh --causal bottom-right --fp8 hopper --no-sdpa --sustain-ms 300 --samples 150 --out-dir $R/o_${i}_${sh}_def
    t k_${i}_${sh}_kv 30 N/xtask bench --shape $sh --causal bottom-right --config wg64_128_s4_ia_kv --fp8 hopper --fp8-config wg64_128_s4_ia_kv --no-sdpa --sustain-ms 300 --samples 150 --out-dir $R/o_${i}_${sh}_kv
  done
done
