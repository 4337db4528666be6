#!/bin/bash
# run 342 (H200): N as run 341 (21eb4d9). D = 32, which shares D = 64's tiles and now its
# key-split model, untimed: the default against the other tile pinned (128-row where the
# default is the key split, the key split where it is 128 rows), causal, f16 only, two rounds.
set -u
N=342; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/packN.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
B="--causal bottom-right --no-sdpa --sustain-ms 300 --samples 150"
for i in 1 2; do
  for sh in 1,4,2048,32 1,16,768,32 1,16,1024,32 1,32,512,32 1,16,1280,32; do
    t k_${i}_${sh}_def 20 N/xtask bench --shape $sh $B --out-dir $R/o_${i}_${sh}_def
    t k_${i}_${sh}_kv 20 N/xtask bench --shape $sh $B --config wg64_128_s4_ia_kv --out-dir $R/o_${i}_${sh}_kv
    t k_${i}_${sh}_pp 20 N/xtask bench --shape $sh $B --config wg128_128_s2_pp_ia --out-dir $R/o_${i}_${sh}_pp
  done
done
exit 0
