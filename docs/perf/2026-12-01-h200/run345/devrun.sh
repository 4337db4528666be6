#!/bin/bash
# run 345 (H200): O = run 343's binary (the old merge), N = run 344's (the batched merge).
# Run 344's f16 decode D = 64 "regression" (16.6 -> 20.6 us) compared a graph-timed O with an
# event-timed N (the auto timing switched at 20 us). (1) Decode and small split launches with
# --timing graph, O and N alternating, three rounds. (2) ncu on FP8 D = 64 decode (O, N).
# (3) SASS of the f16 D = 64 decode unit, old and new (target/sass).
set -u
N=345; R=/tmp/r$N
mkdir -p $R /tmp/pN /tmp/pO; tar xJf target/pack344.txz -C /tmp/pN; tar xJf target/pack343.txz -C /tmp/pO
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
B="--fp8 hopper --no-sdpa --sustain-ms 300 --samples 150 --timing graph"
for i in 1 2 3; do
  for v in O N; do
    X=/tmp/p$v/$([ $v = O ] && echo 343 || echo 344)/xtask
    for sh in 1,8:8,1x16384,64 1,32,1x8192,128 1,32:8,1x4096,128 4,32:8,1x2048,64 1,16:16,64x4096,64; do
      t ${v}_${i}_${sh} 30 $X bench --shape $sh $B --out-dir $R/o${v}_${i}_${sh}
    done
  done
done
for v in O N; do
  X=/tmp/p$v/$([ $v = O ] && echo 343 || echo 344)/xtask
  t ncu_$v 90 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis -k regex:attn_fwdh8 --launch-skip 20 --launch-count 1 $X bench --shape 1,8:8,1x16384,64 --fp8 hopper --no-sdpa --sustain-ms 0 --samples 5 --warmup 25 --timing events --out-dir $R/ncuo_$v
done
for c in old new; do cuobjdump -sass -fun attn_dec_f16_d64_r1 target/sass/dec_$c.cubin > $R/sass_$c.txt 2>&1; done
exit 0
