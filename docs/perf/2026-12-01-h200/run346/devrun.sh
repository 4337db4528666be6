#!/bin/bash
# run 346 (H200): O = run 344's binary (one float4 per merge step), N = two float4s per step in
# the Hopper split entries at D <= 128 (merge_splits QUADS). (1) The whole GPU suite on N.
# (2) The merge's share (1, 64 and 128 queries against 16384 keys), chunks and
# decode, graph-timed below 20 us as O, O and N alternating, two rounds.
set -u
N=346; R=/tmp/r$N
mkdir -p $R /tmp/pN /tmp/pO; tar xJf target/pack346.txz -C /tmp/pN; tar xJf target/pack344.txz -C /tmp/pO
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
t suite 280 /tmp/pN/346/gpu --ignored
B="--fp8 hopper --no-sdpa --sustain-ms 300 --samples 150"
for i in 1 2; do
  for v in O N; do
    X=/tmp/p$v/$([ $v = O ] && echo 344 || echo 346)/xtask
    for sh in 1,16:16,1x16384,128 1,16:16,64x16384,128 1,16:16,128x16384,128 1,16:16,128x16384,64 1,16:16,512x8192,128 1,16:16,128x16384,256; do
      t ${v}_${i}_${sh} 30 $X bench --shape $sh $B --timing events --out-dir $R/o${v}_${i}_${sh}
    done
    t ${v}_${i}_c 30 $X bench --shape 1,16:16,128x16384,128 --causal bottom-right $B --timing events --out-dir $R/o${v}_${i}_c
    for sh in 1,8:8,1x16384,64 1,32:8,1x4096,128 1,16:16,64x4096,64; do
      t ${v}_${i}_${sh} 30 $X bench --shape $sh $B --timing graph --out-dir $R/o${v}_${i}_${sh}
    done
  done
done
exit 0
