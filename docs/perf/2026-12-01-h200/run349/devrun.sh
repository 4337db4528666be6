#!/bin/bash
# run 349 (H200): the SDPA baseline of bottom-right rows with Sq != Sk on the lower-right
# causal bias (xtask/scripts/sdpa_bench.py; run 348 timed SDPA on PyTorch's top-left is_causal).
# Chunked prefill shapes, causal bottom-right, f16 and FP8 ours against SDPA, two rounds.
set -u
N=349; R=/tmp/r$N
mkdir -p $R /tmp/pN; tar xJf target/pack349.txz -C /tmp/pN
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
X=/tmp/pN/349/xtask
B="--fp8 hopper --sustain-ms 300 --samples 150 --causal bottom-right"
for i in 1 2; do
  t c128_$i 60 $X bench --shape 1,16:16,128x16384,128 $B --out-dir $R/oc128_$i
  t c64_$i 60 $X bench --shape 1,16:16,128x16384,64 $B --out-dir $R/oc64_$i
  t cgqa_$i 60 $X bench --shape 1,32:8,512x8192,128 $B --out-dir $R/ocgqa_$i
done
exit 0
