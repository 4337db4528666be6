#!/bin/bash
# run 312 (H200): 4e2d521's kernels (the session's base; bench gained --sustain-ms): the whole GPU
# suite, debug:: on the debug-kernels build, the four sanitizers on the persistent backward
# test; then the forward's standing against SDPA and cuDNN FP8 at 500 and 1500 ms of sustained load.
set -u
N=312; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; tar xJf target/pack${N}D.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
python3 -m pip install --no-deps --target /tmp/pyfp8 target/whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?" >> $R/pip.log
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 240 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
s=$(date +%s); timeout 60 D/gpu --ignored debug:: > $R/debug.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/debug.log
for tool in memcheck racecheck synccheck initcheck; do
s=$(date +%s); timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact backward::correctness_backward_persistent > $R/$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$tool.log
done
for ms in 500 1500; do
s=$(date +%s); timeout 70 N/xtask bench --shapes large --dtype bf16 --samples 200 --sustain-ms $ms --out-dir $R/large$ms > $R/large$ms.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/large$ms.log
s=$(date +%s); timeout 30 N/xtask bench --shape 4,16,4096,128 --dtype f16 --fp8 hopper --samples 200 --no-sdpa --sustain-ms $ms --out-dir $R/fp8_$ms > $R/fp8_$ms.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/fp8_$ms.log
PYTHONPATH=/tmp/pyfp8 timeout 40 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 200 --warmup-ms $ms 4,16,4096,128 1,16,16384,128 > $R/cudnn_fp8_$ms.json 2> $R/cudnn_fp8_$ms.err
s=$(date +%s); timeout 30 N/xtask bench --shape 1,16,16384,128 --dtype f16 --fp8 hopper --samples 200 --no-sdpa --sustain-ms $ms --out-dir $R/fp8_16k_$ms > $R/fp8_16k_$ms.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/fp8_16k_$ms.log
done
