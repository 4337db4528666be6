#!/bin/bash
# run 341 (H200): N = the key-split grid model for causal launches and the dense split's new
# bound (plus the tie-aware gradient rule). (1) The whole GPU suite; attn-candle's CUDA tests.
# (2) The new defaults on shapes runs 336–340 timed (f16 and FP8 in one call), two rounds.
set -u
N=341; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/packN.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
t suite 280 N/gpu --ignored
export LD_LIBRARY_PATH="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ -x N/candle ] && t candle 100 N/candle --ignored --test-threads 1
B="--fp8 hopper --no-sdpa --sustain-ms 300 --samples 150"
for i in 1 2; do
  for sh in 1,4,2048,64 1,4,2048,128 1,2,4096,64 1,16,768,64 1,16,1024,64 1,16,1024,128 2,8,1024,128 1,32,512,64; do
    t c_${i}_${sh} 30 N/xtask bench --shape $sh --causal bottom-right $B --out-dir $R/oc_${i}_${sh}
  done
  for sh in 1,4,2048,64 1,4,2048,128 1,16:16,512x8192,64 1,16:16,256x8192,128; do
    t n_${i}_${sh} 30 N/xtask bench --shape $sh $B --out-dir $R/on_${i}_${sh}
  done
done
exit 0
