#!/bin/bash
# run 194 (H200): the session's final build (FP8 defaults: 192 keys at D = 64 and 128, with
# ping-pong when causal at D = 128; 96 keys with ping-pong at D = 256). B's whole GPU suite;
# bench large + D = 256 with FP8 (two rounds); cuDNN FP8 SDPA before and after.
set -u
N=194; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
python3 -m pip install --no-deps --target /tmp/pyfp8 target/whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?" >> $R/pip.log
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 260 B/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
FP8SH="4,16,4096,64 4,16,4096,64,causal 4,16,4096,128 4,16,4096,128,causal 1,16,16384,128 4,16,4096,256"
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 100 $FP8SH > $R/cudnn_fp8_1.json 2> $R/cudnn_fp8_1.err
for i in 1 2; do
  timeout 60 B/xtask bench --shapes large --dtype f16 --fp8 hopper --samples 100 --no-sdpa --out-dir $R/b_$i > $R/b_$i.log 2>&1
  timeout 60 B/xtask bench --shape 4,16,4096,256 --dtype f16 --fp8 hopper --samples 100 --no-sdpa --out-dir $R/b256_$i > $R/b256_$i.log 2>&1
done
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 100 $FP8SH > $R/cudnn_fp8_2.json 2> $R/cudnn_fp8_2.err
