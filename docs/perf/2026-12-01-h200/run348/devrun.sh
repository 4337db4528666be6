#!/bin/bash
# run 348 (H200): N = the final code (bwd_hopper_kernel.cuh without the unused q_pad).
# (1) The backward GPU tests. (2) Chunked prefill and decode against SDPA in the same process
# (f16 ours, FP8 ours, SDPA's backends), two rounds.
set -u
N=348; R=/tmp/r$N
mkdir -p $R /tmp/pN; tar xJf target/pack348.txz -C /tmp/pN
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
t backward 200 /tmp/pN/348/gpu --ignored backward
X=/tmp/pN/348/xtask
B="--fp8 hopper --sustain-ms 300 --samples 150"
for i in 1 2; do
  t chunk_$i 60 $X bench --shape 1,16:16,128x16384,128 $B --out-dir $R/ochunk_$i
  t chunkc_$i 60 $X bench --shape 1,16:16,128x16384,128 --causal bottom-right $B --out-dir $R/ochunkc_$i
  t chunk64_$i 60 $X bench --shape 1,16:16,128x16384,64 $B --out-dir $R/ochunk64_$i
  t dec_$i 60 $X bench --shape 1,32,1x8192,128 $B --out-dir $R/odec_$i
done
exit 0
