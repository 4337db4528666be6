#!/bin/bash
# run 256 (H200): F3 = c5ac4b6 + the FP8 Hopper catalog trimmed to the selected tiles (sm_90a,
# every head dim): the whole GPU suite. V1 / V2 = F3 + a quarter / half of the FP8 softmax's
# exponentials on the FMA pipe (FlashAttention-4's polynomial exp2, degree 3; sm_90a, D = 128
# only): their fp8:: tests, then bench FP8 at 4,16,4096,128 (full and causal) on F3, V1, V2,
# rotating, two rounds.
set -u
N=256; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 280 F3/gpu --ignored > $R/suite_F3.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite_F3.log
for b in V1 V2; do
  s=$(date +%s); timeout 60 $b/gpu --ignored fp8:: > $R/tests_fp8_$b.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_fp8_$b.log
done
for r in 1 2; do
  for b in F3 V1 V2; do
    for c in none bottom-right; do
      timeout 40 $b/xtask bench --shape 4,16,4096,128 --causal $c --dtype f16 --fp8 hopper --samples 200 --no-sdpa --out-dir $R/${b}_${c}_$r > $R/${b}_${c}_$r.log 2>&1
    done
  done
done
