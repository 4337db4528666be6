#!/bin/bash
# run 192 (H200): A = c554b54 (the session's base), B = bcc5340 + FlashAttention-3's 224-key FP8
# tile at D = 128 (Vᵀ in 32-byte swizzle spans, two V landing stages). B's FP8 tests; 192- and
# 224-key tiles on the D = 128 shapes (two rounds, alternating, A's large set each round);
# cuDNN FP8 SDPA before and after; B's whole GPU suite; sanitizers on the 224-key tile.
set -u
N=192; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
python3 -m pip install --no-deps --target /tmp/pyfp8 target/whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?" >> $R/pip.log
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 120 B/gpu --ignored fp8 > $R/fp8_tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/fp8_tests.log
FP8SH="4,16,4096,64 4,16,4096,128 4,16,4096,128,causal 1,16,16384,128 4,16,4096,256"
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 100 $FP8SH > $R/cudnn_fp8_1.json 2> $R/cudnn_fp8_1.err
for i in 1 2; do
  timeout 60 A/xtask bench --shapes large --dtype f16 --fp8 hopper --samples 100 --no-sdpa --out-dir $R/a_$i > $R/a_$i.log 2>&1
  timeout 60 B/xtask bench --shapes large --dtype f16 --fp8 hopper --samples 100 --no-sdpa --out-dir $R/b_$i > $R/b_$i.log 2>&1
  for cfg in wg128_192_s2_ia wg128_224_s2_ia wg128_192_s2_pp_ia; do
    for sh in 4,16,4096,128 1,16,16384,128; do
      n=$(echo $sh | tr ',' '_'); timeout 60 B/xtask bench --shape $sh --dtype f16 --fp8 hopper --fp8-config $cfg --samples 100 --no-sdpa --out-dir $R/t_${cfg}_${n}_$i > $R/t_${cfg}_${n}_$i.log 2>&1
    done
    timeout 60 B/xtask bench --shape 4,16,4096,128 --causal bottom-right --dtype f16 --fp8 hopper --fp8-config $cfg --samples 100 --no-sdpa --out-dir $R/t_${cfg}_causal_$i > $R/t_${cfg}_causal_$i.log 2>&1
  done
done
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 100 $FP8SH > $R/cudnn_fp8_2.json 2> $R/cudnn_fp8_2.err
s=$(date +%s); timeout 260 B/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
for t in racecheck synccheck memcheck; do
  timeout 40 compute-sanitizer --tool $t --error-exitcode 9 B/xtask bench --shape 2,4:2,300,128 --fp8 hopper --fp8-config wg128_224_s2_ia --once --no-sdpa > $R/${t}_224.log 2>&1; echo "rc=$?" >> $R/${t}_224.log
  timeout 40 compute-sanitizer --tool $t --error-exitcode 9 B/xtask bench --shape 2,4:2,300,128 --causal bottom-right --fp8 hopper --fp8-config wg128_224_s2_ia --once --no-sdpa > $R/${t}_224_causal.log 2>&1; echo "rc=$?" >> $R/${t}_224_causal.log
done
