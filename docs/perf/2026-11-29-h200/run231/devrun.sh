#!/bin/bash
# run 231 (H200): F = the staged walking epilogue (uncommitted, on 636dc2e): the 128-key D = 128
# tiles walk again, with the stream-K tail, and walking f16/bf16 entries stage O in a tile of
# their own where it fits (128-key: yes; 176-key: no). O = 636dc2e (run 230's F: 128-key one
# item per CTA). A/B at 4,16,4096,128 and 8,16,2048,128 (both dtypes, two rounds, alternating),
# ncu at locked clocks; the schedule tests and memcheck on the stream-K test.
set -u
N=231; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 100 F/gpu --ignored schedule > $R/t_schedule.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/t_schedule.log
s=$(date +%s); timeout 120 compute-sanitizer --tool memcheck F/gpu --ignored stream_k > $R/t_memcheck.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/t_memcheck.log
NCU="ncu --metrics gpu__time_duration.sum -k regex:attn_fwdh --launch-count 4"
for b in O F; do
  $NCU $b/xtask bench --shape 4,16,4096,128 --dtype bf16 --no-sdpa --samples 3 --warmup 1 > $R/ncu_${b}_4096.log 2>&1
done
$NCU F/xtask bench --shape 4,16,4096,128 --dtype bf16 --no-sdpa --samples 3 --warmup 1 --schedule grid > $R/ncu_F_4096_grid.log 2>&1
$NCU F/xtask bench --shape 4,16,4096,128 --dtype bf16 --no-sdpa --samples 3 --warmup 1 --schedule persistent > $R/ncu_F_4096_persistent.log 2>&1
for r in 1 2; do
  for b in O F; do
    for sh in 4,16,4096,128 8,16,2048,128; do
      timeout 60 $b/xtask bench --shape $sh --dtype both --samples 200 --no-sdpa --out-dir $R/${b}_${sh}_$r > $R/${b}_${sh}_$r.log 2>&1
    done
  done
done
timeout 60 F/xtask bench --shape 4,16,4096,128 --dtype both --samples 200 --out-dir $R/F_sdpa > $R/F_sdpa.log 2>&1
