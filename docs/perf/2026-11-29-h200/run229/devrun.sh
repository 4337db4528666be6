#!/bin/bash
# run 229 (H200): F = the stream-K tail on the walking entries only (the 128-key D = 128 tiles
# back to one item per CTA; uncommitted, on 25bd852). The schedule tests, memcheck on the
# stream-K test; A/B persistent (whole items) vs stream-k on the walking launches (f16/bf16
# 176-key at 8192/16384, and at 4096 against the 128-key default; FP8 at 4096/8192/16384), two
# rounds; bench large with SDPA (cuDNN FP8: run 230).
set -u
N=229; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 100 F/gpu --ignored schedule > $R/t_schedule.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/t_schedule.log
s=$(date +%s); timeout 150 compute-sanitizer --tool memcheck F/gpu --ignored stream_k > $R/t_memcheck.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/t_memcheck.log
for r in 1 2; do
  for sh in 2,16,8192,128 1,16,16384,128; do
    for sc in persistent stream-k; do
      timeout 60 F/xtask bench --shape $sh --dtype both --schedule $sc --samples 200 --no-sdpa --out-dir $R/b_${sh}_${sc}_$r > $R/b_${sh}_${sc}_$r.log 2>&1
    done
  done
  for sh in 4,16,4096,128 2,16,8192,128 1,16,16384,128; do
    for sc in persistent stream-k; do
      timeout 60 F/xtask bench --shape $sh --dtype f16 --fp8 hopper --schedule $sc --samples 200 --no-sdpa --out-dir $R/f8_${sh}_${sc}_$r > $R/f8_${sh}_${sc}_$r.log 2>&1
    done
  done
  timeout 60 F/xtask bench --shape 4,16,4096,128 --dtype both --samples 200 --no-sdpa --out-dir $R/b4096_default_$r > $R/b4096_default_$r.log 2>&1
  timeout 60 F/xtask bench --shape 4,16,4096,128 --dtype both --config wg128_176_s2_pp_ia --samples 200 --no-sdpa --out-dir $R/b4096_176sk_$r > $R/b4096_176sk_$r.log 2>&1
done
timeout 150 F/xtask bench --shapes large --dtype both --samples 200 --out-dir $R/large > $R/large.log 2>&1
# ncu (clocks locked to base, so no power cap): per-launch time of the 128-key bf16 tile at
# 4,16,4096,128 one item per CTA (N = run 227's build) and walking (W = run 228's build: grid /
# persistent / stream-k); FP8 at 4096 persistent vs stream-k (F).
NCU="ncu --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second -k regex:attn_fwdh --launch-count 4"
$NCU N/xtask bench --shape 4,16,4096,128 --dtype bf16 --no-sdpa --samples 3 --warmup 1 > $R/ncu_nonwalk.log 2>&1
for sc in grid persistent stream-k; do
  $NCU W/xtask bench --shape 4,16,4096,128 --dtype bf16 --no-sdpa --samples 3 --warmup 1 --schedule $sc > $R/ncu_walk_$sc.log 2>&1
  ${NCU/attn_fwdh/attn_fwdh8} F/xtask bench --shape 4,16,4096,128 --dtype f16 --fp8 hopper --no-sdpa --samples 3 --warmup 1 --schedule $sc > $R/ncu_fp8_$sc.log 2>&1
  $NCU F/xtask bench --shape 1,16,16384,128 --dtype bf16 --no-sdpa --samples 3 --warmup 1 --schedule $sc > $R/ncu_16k_$sc.log 2>&1
done
