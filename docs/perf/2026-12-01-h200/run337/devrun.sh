#!/bin/bash
# run 337 (H200): N as run 336 (+ a GradientWorst unit change). Run 336 found the key-split
# tile faster than the default on one causal grid of one wave of 128-row blocks (1,16,1024:
# D = 64 f16 0.945, FP8 0.899; FP8 D = 128 0.775; f16 D = 128 1.276 slower) and slower on every
# larger grid. Here more causal grids of at most about one wave, key split against the
# default (f16 and FP8 in one call), and for FP8 D = 128 also the 192-key tile without
# ping-pong; two rounds. Then attn-candle's CUDA tests if the binary came along.
set -u
N=337; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/packN.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
B="--causal bottom-right --fp8 hopper --no-sdpa --sustain-ms 300 --samples 150"
for i in 1 2; do
  for s in 1,8,2048 2,8,1024 1,4,4096 1,16,768 1,32,512 1,12,1024 1,16,1280 3,16,512; do
    for d in 64 128; do
      sh=$s,$d
      if [ $d = 64 ]; then kv=wg64_128_s4_ia_kv; else kv=wg64_64_s4_ia_kv; fi
      t k_${i}_${sh}_def 30 N/xtask bench --shape $sh $B --out-dir $R/o_${i}_${sh}_def
      t k_${i}_${sh}_kv 30 N/xtask bench --shape $sh $B --config $kv --fp8-config $kv --out-dir $R/o_${i}_${sh}_kv
      [ $d = 128 ] && t k_${i}_${sh}_np 30 N/xtask bench --shape $sh $B --fp8-config wg128_192_s2_ia --out-dir $R/o_${i}_${sh}_np
    done
  done
done
[ -x N/candle ] && t candle 120 N/candle --ignored --test-threads 1
