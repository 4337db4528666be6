#!/bin/bash
# run 230 (H200): F = 636dc2e (the stream-K tail, committed): bench large with SDPA and cuDNN's FP8 SDPA (standings). E = an
# experiment build (not committed): the 128-key D = 128 tiles walk, and walking entries stage
# O through the Q tile and hand Q back after the epilogue (as the one-item entries do), to see
# whether the walking entries' per-item cost (run 229: 5-8 % under ncu) is their epilogue.
set -u
N=230; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
python3 -m pip install --no-deps --target /tmp/pyfp8 target/whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?" >> $R/pip.log
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
NCU="ncu --metrics gpu__time_duration.sum -k regex:attn_fwdh --launch-count 4"
$NCU F/xtask bench --shape 4,16,4096,128 --dtype bf16 --no-sdpa --samples 3 --warmup 1 > $R/ncu_F_default.log 2>&1
for sc in grid persistent; do
  $NCU E/xtask bench --shape 4,16,4096,128 --dtype bf16 --no-sdpa --samples 3 --warmup 1 --schedule $sc > $R/ncu_E_$sc.log 2>&1
  $NCU E/xtask bench --shape 1,16,16384,128 --dtype bf16 --no-sdpa --samples 3 --warmup 1 --schedule $sc > $R/ncu_E16k_$sc.log 2>&1
done
$NCU F/xtask bench --shape 1,16,16384,128 --dtype bf16 --no-sdpa --samples 3 --warmup 1 --schedule persistent > $R/ncu_F16k_persistent.log 2>&1
for r in 1 2; do
  timeout 60 F/xtask bench --shape 4,16,4096,128 --dtype both --samples 200 --no-sdpa --out-dir $R/F4096_$r > $R/F4096_$r.log 2>&1
  timeout 60 E/xtask bench --shape 4,16,4096,128 --dtype both --schedule persistent --samples 200 --no-sdpa --out-dir $R/E4096_$r > $R/E4096_$r.log 2>&1
  timeout 60 E/xtask bench --shape 1,16,16384,128 --dtype both --schedule persistent --samples 200 --no-sdpa --out-dir $R/E16k_$r > $R/E16k_$r.log 2>&1
  timeout 60 F/xtask bench --shape 1,16,16384,128 --dtype both --schedule persistent --samples 200 --no-sdpa --out-dir $R/F16k_$r > $R/F16k_$r.log 2>&1
done
timeout 150 F/xtask bench --shapes large --dtype both --samples 200 --out-dir $R/large > $R/large.log 2>&1
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 200 4,16,4096,64 4,16,4096,128 2,16,8192,128 1,16,16384,128 > $R/cudnn_fp8.json 2> $R/cudnn_fp8.err
timeout 120 F/xtask bench --shapes large --dtype f16 --fp8 hopper --samples 200 --no-sdpa --out-dir $R/fp8 > $R/fp8.log 2>&1
