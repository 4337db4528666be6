#!/bin/bash
# run 227 (H200): N = 25bd852 (the last session's final xtask). (1) Does the forward lose a
# tail wave? bf16 bench with SDPA, and FP8 (ours and cuDNN's FP8 SDPA), on item counts of
# 15.5 rounds (4,16,4096: 2048 items of 128 rows on 132 SMs), 16.0 rounds (4,16,4224: 2112),
# 31.03 rounds (4,32,4096: 4096) and 32.0 rounds (4,33,4096: 4224). (2) Smoke of 25bd852's
# xtask changes: train-bench at 4,16,4096,128.
set -u
N=227; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
python3 -m pip install --no-deps --target /tmp/pyfp8 target/whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?" >> $R/pip.log
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
SH="4,16,4096,128 4,16,4224,128 4,32,4096,128 4,33,4096,128"
for r in 1 2; do
for s in $SH; do
  timeout 60 N/xtask bench --shape $s --dtype bf16 --samples 200 --out-dir $R/bf16_${s}_$r > $R/bf16_${s}_$r.log 2>&1; echo "rc=$?" >> $R/bf16_${s}_$r.log
  timeout 60 N/xtask bench --shape $s --dtype f16 --fp8 hopper --samples 200 --no-sdpa --out-dir $R/fp8_${s}_$r > $R/fp8_${s}_$r.log 2>&1; echo "rc=$?" >> $R/fp8_${s}_$r.log
done
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 200 $SH > $R/cudnn_fp8_$r.json 2> $R/cudnn_fp8_$r.err
done
s=$(date +%s); timeout 90 N/xtask train-bench --shapes "4,16,4096,128" --iters 10 --varlen-seqs 0 > $R/train.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train.log
