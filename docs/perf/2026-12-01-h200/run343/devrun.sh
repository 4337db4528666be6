#!/bin/bash
# run 343 (H200): N = FP8 split-KV on the Hopper engine (`_seq` entries of the FP8 seq tile).
# (1) The FP8, split and Hopper GPU tests. (2) Decode and chunked-prefill shapes, FP8 and f16,
# unasked (FP8 splits) against --splits 1 (the dense entries), two rounds.
set -u
N=343; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack343.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
t split 120 343/gpu --ignored fp8::correctness_fp8_hopper_split_kv --nocapture
t fp8 150 343/gpu --ignored fp8::
t tests 150 343/gpu --ignored splits:: hopper:: schedule::
B="--fp8 hopper --no-sdpa --sustain-ms 300 --samples 150"
for i in 1 2; do
  for sh in 1,32,1x8192,128 1,16:16,128x16384,128 1,16:16,128x16384,64 1,16:16,128x16384,256 1,8:8,1x16384,64; do
    t a_${i}_${sh} 30 343/xtask bench --shape $sh $B --out-dir $R/oa_${i}_${sh}
    t s_${i}_${sh} 30 343/xtask bench --shape $sh $B --splits 1 --out-dir $R/os_${i}_${sh}
  done
  t ac_${i} 30 343/xtask bench --shape 1,16:16,128x16384,128 --causal bottom-right $B --out-dir $R/oac_${i}
  t sc_${i} 30 343/xtask bench --shape 1,16:16,128x16384,128 --causal bottom-right $B --splits 1 --out-dir $R/osc_${i}
done
exit 0
