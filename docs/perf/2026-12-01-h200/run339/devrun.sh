#!/bin/bash
# run 339 (H200): N as run 337. Run 338 found f16/bf16 causal launches of small grids over
# long keys (1,4,2048 and 1,2,4096) running the split-KV feature entries (plan_hopper's
# dense_split: 32.4 µs at 1,4,2048,64) where FP8 runs the key-split tile (13.2 µs). Default
# (whatever the rules pick) against the key-split tile pinned, causal, self-attention and
# chunked-prefill shapes (few query rows against long keys), D = 64 and 128, two rounds.
set -u
N=339; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/packN.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
B="--causal bottom-right --fp8 hopper --no-sdpa --sustain-ms 300 --samples 150"
for i in 1 2; do
  for s in 1,4,2048 1,2,4096 1,1,8192 2,2,2048 1,4,4096 1,16:16,256x8192 1,16:16,512x8192 1,8:8,1024x8192 1,16:16,128x16384; do
    for d in 64 128; do
      sh=$s,$d
      if [ $d = 64 ]; then kv=wg64_128_s4_ia_kv; else kv=wg64_64_s4_ia_kv; fi
      t k_${i}_${sh}_def 30 N/xtask bench --shape $sh $B --out-dir $R/o_${i}_${sh}_def
      t k_${i}_${sh}_kv 30 N/xtask bench --shape $sh $B --config $kv --fp8-config $kv --out-dir $R/o_${i}_${sh}_kv
    done
  done
done
[ -x N/candle ] && t candle 150 N/candle --ignored --test-threads 1
exit 0
