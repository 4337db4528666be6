#!/bin/bash
# run 170 (H200): the session's base a28f24f (all head dims, sm_80 + sm_90a) against the baselines on this GPU: bench large (f16, bf16, FP8 hopper) with SDPA; cuDNN FP8 SDPA; bench decode (f16) with SDPA; train-bench with SDPA's backward; ncu (source counters) on the deterministic D = 256 backward.
set -u
N=170; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
python3 -m pip install --no-deps --target /tmp/pyfp8 target/whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?" >> $R/pip.log
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
FP8SH="4,16,4096,64 4,16,4096,64,causal 4,16,4096,128 4,16,4096,128,causal 1,16,16384,128"
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 100 $FP8SH > $R/cudnn_fp8_1.json 2> $R/cudnn_fp8_1.err
s=$(date +%s); timeout 200 base/xtask bench --shapes large --dtype both --fp8 hopper --samples 100 --out-dir $R/large > $R/large.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/large.log
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 100 $FP8SH > $R/cudnn_fp8_2.json 2> $R/cudnn_fp8_2.err
s=$(date +%s); timeout 60 base/xtask bench --shapes decode --dtype f16 --samples 200 --out-dir $R/decode > $R/decode.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/decode.log
s=$(date +%s); timeout 120 base/xtask train-bench --shapes "4,16,4096,128;4,16,4096,64;4,16,4096,256" --iters 10 --varlen-seqs 0 > $R/train.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train.log
s=$(date +%s); timeout 150 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters --import-source no -k 'regex:attn_bwd_wg_bf16_d256_full$' --launch-skip 5 --launch-count 1 --export $R/det256 base/xtask train-bench --shapes "4,16,4096,256" --python none --warmup 1 --iters 3 --varlen-seqs 0 > $R/ncu.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ncu.log
timeout 60 ncu --import $R/det256.ncu-rep --page source --csv --print-source sass > $R/source.csv 2> $R/source.err; gzip $R/source.csv
tar czf $OUT/logs$N.tgz -C /tmp r$N
