#!/bin/bash
# run 344 (H200): O = run 343's binary (FP8 split-KV, the old merge), N = the merge that batches
# its loads (split_combine.cuh, lse_merge.cuh). (1) The whole GPU suite on N; attn-candle's
# CUDA tests. (2) The merge's share: split launches of 1, 64 and 128 queries against 16384 keys
# (the same tiles and splits; only the rows merged change), decode and chunk shapes, O and N
# alternating, two rounds.
set -u
N=344; R=/tmp/r$N
mkdir -p $R /tmp/pN /tmp/pO; tar xJf target/pack344.txz -C /tmp/pN; tar xJf target/pack343.txz -C /tmp/pO
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
t suite 280 /tmp/pN/344/gpu --ignored
export LD_LIBRARY_PATH="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ -x /tmp/pN/344/candle ] && t candle 100 /tmp/pN/344/candle --ignored --test-threads 1
B="--fp8 hopper --no-sdpa --sustain-ms 300 --samples 150"
for i in 1 2; do
  for v in O N; do
    X=/tmp/p$v/$([ $v = O ] && echo 343 || echo 344)/xtask
    for sh in 1,16:16,1x16384,128 1,16:16,64x16384,128 1,16:16,128x16384,128 1,16:16,128x16384,64 1,32,1x8192,128 1,8:8,1x16384,64 1,16:16,512x8192,128; do
      t ${v}_${i}_${sh} 30 $X bench --shape $sh $B --out-dir $R/o${v}_${i}_${sh}
    done
    t ${v}_${i}_c 30 $X bench --shape 1,16:16,128x16384,128 --causal bottom-right $B --out-dir $R/o${v}_${i}_c
    t ${v}_${i}_mma 30 $X bench --shape 1,16:16,64x8192,128 --config mma --out-dir $R/o${v}_${i}_mma --no-sdpa --sustain-ms 300 --samples 150
  done
done
exit 0
