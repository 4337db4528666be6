#!/bin/bash
# run 220 (H200): the FP8 standing at sustained clocks. N = run 219's xtask (bench with the
# 0.5 s sustained warm-up): our Hopper FP8 forward (f16 out), bench large + D = 256, two
# rounds; cuDNN's FP8 SDPA (E4M3 out) by scripts/cudnn_fp8_sdpa.py now timed the same way
# (0.5 s warm-up, samples back to back), before and after ours; and once by the old script
# (20 warm-ups, a synchronization per sample) for the duty-cycle effect.
set -u
N=220; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack219.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
python3 -m pip install --no-deps --target /tmp/pyfp8 target/whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?" >> $R/pip.log
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
FP8SH="4,16,4096,64 4,16,4096,64,causal 4,16,4096,128 4,16,4096,128,causal 1,16,16384,128 4,16,4096,256"
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/target/cudnn_fp8_old.py --samples 200 $FP8SH > $R/cudnn_fp8_old.json 2> $R/cudnn_fp8_old.err
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 200 $FP8SH > $R/cudnn_fp8_1.json 2> $R/cudnn_fp8_1.err
for i in 1 2; do
  s=$(date +%s); timeout 90 N/xtask bench --shapes large --dtype f16 --fp8 hopper --samples 200 --no-sdpa --out-dir $R/ours_$i > $R/ours_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ours_$i.log
  s=$(date +%s); timeout 60 N/xtask bench --shape 4,16,4096,256 --dtype f16 --fp8 hopper --samples 200 --no-sdpa --out-dir $R/ours256_$i > $R/ours256_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ours256_$i.log
done
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 200 $FP8SH > $R/cudnn_fp8_2.json 2> $R/cudnn_fp8_2.err
