#!/bin/bash
# run 332 (H200): N = main (the grid model, f16 192-row speed 1.2). (1) The causal D = 64 shapes
# whose f16 pick moved with the speed 1.15 -> 1.2 (8,32,768 16,16,768 16,32,768: 128 -> 192
# rows), both tiles pinned. (2) The standing: `bench --shapes large --dtype f16 --fp8 auto`
# against SDPA and cuDNN's FP8 SDPA, 1500 ms sustained.
set -u
N=332; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/packN.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
python3 -m pip install --no-deps --target /tmp/pyfp8 target/whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?" >> $R/pip.log
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
for sh in 8,32,768,64 16,16,768,64 16,32,768,64; do
  t b_${sh}_192 30 N/xtask bench --shape $sh --causal bottom-right --config wg192_128_s2_pp_ia --no-sdpa --sustain-ms 300 --samples 150 --out-dir $R/o_${sh}_192
  t b_${sh}_128 30 N/xtask bench --shape $sh --causal bottom-right --config wg128_128_s2_pp_ia --no-sdpa --sustain-ms 300 --samples 150 --out-dir $R/o_${sh}_128
done
PYTHONPATH=/tmp/pyfp8 t large 300 N/xtask bench --shapes large --dtype f16 --fp8 auto --samples 100 --sustain-ms 1500 --out-dir $R/large
