#!/bin/bash
# run 228 (H200): F = the stream-K tail build (uncommitted, on 25bd852). (1) GPU tests: the
# schedule group (persistent and stream-K walks, f16/bf16 and FP8), the Hopper and FP8 groups;
# memcheck on the FP8 walk test. (2) A/B of the schedules on the large D = 128 shapes: grid /
# persistent (whole items) / stream-k / auto, bf16 and f16, two rounds; FP8 persistent vs
# stream-k; cuDNN (SDPA and FP8) in the same call.
set -u
N=228; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
python3 -m pip install --no-deps --target /tmp/pyfp8 target/whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?" >> $R/pip.log
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 150 F/gpu --ignored schedule > $R/t_schedule.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/t_schedule.log
s=$(date +%s); timeout 120 compute-sanitizer --tool memcheck F/gpu --ignored correctness_fp8_persistent > $R/t_memcheck.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/t_memcheck.log
for r in 1 2; do
for sh in 4,16,4096,128 1,16,16384,128; do
  for sc in grid persistent stream-k; do
    timeout 60 F/xtask bench --shape $sh --dtype both --schedule $sc --samples 200 --no-sdpa --out-dir $R/b_${sh}_${sc}_$r > $R/b_${sh}_${sc}_$r.log 2>&1
    timeout 60 F/xtask bench --shape $sh --dtype f16 --fp8 hopper --schedule $sc --samples 200 --no-sdpa --out-dir $R/f8_${sh}_${sc}_$r > $R/f8_${sh}_${sc}_$r.log 2>&1
  done
done
done
timeout 120 F/xtask bench --shapes large --dtype both --samples 200 --out-dir $R/large > $R/large.log 2>&1
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 200 4,16,4096,128 2,16,8192,128 1,16,16384,128 > $R/cudnn_fp8.json 2> $R/cudnn_fp8.err
s=$(date +%s); timeout 200 F/gpu --ignored hopper fp8 > $R/t_hopper_fp8.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/t_hopper_fp8.log
