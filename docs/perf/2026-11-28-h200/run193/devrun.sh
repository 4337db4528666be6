#!/bin/bash
# run 193 (H200): B = 8d03599 + 192-key FP8 tiles at D = 64 and 96-key tiles at D = 256.
# B's FP8 tests (every tile against the reference); the new tiles against the defaults (two
# rounds, alternating); cuDNN FP8 SDPA; sanitizers on the new tiles.
set -u
N=193; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
python3 -m pip install --no-deps --target /tmp/pyfp8 target/whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?" >> $R/pip.log
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 120 B/gpu --ignored fp8 > $R/fp8_tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/fp8_tests.log
FP8SH="4,16,4096,64 4,16,4096,64,causal 4,16,4096,256 4,16,4096,256,causal"
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 100 $FP8SH > $R/cudnn_fp8_1.json 2> $R/cudnn_fp8_1.err
for i in 1 2; do
  for cfg in wg128_128_s2_ia wg128_192_s2_ia wg128_192_s2_pp_ia; do for c in none bottom-right; do
    timeout 60 B/xtask bench --shape 4,16,4096,64 --causal $c --dtype f16 --fp8 hopper --fp8-config $cfg --samples 100 --no-sdpa --out-dir $R/d64_${cfg}_${c}_$i > $R/d64_${cfg}_${c}_$i.log 2>&1
  done; done
  for cfg in wg128_64_s2_ia wg128_96_s2_ia wg128_96_s2_pp_ia; do for c in none bottom-right; do
    timeout 60 B/xtask bench --shape 4,16,4096,256 --causal $c --dtype f16 --fp8 hopper --fp8-config $cfg --samples 100 --no-sdpa --out-dir $R/d256_${cfg}_${c}_$i > $R/d256_${cfg}_${c}_$i.log 2>&1
  done; done
done
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 100 $FP8SH > $R/cudnn_fp8_2.json 2> $R/cudnn_fp8_2.err
for t in racecheck synccheck memcheck; do
  timeout 40 compute-sanitizer --tool $t --error-exitcode 9 B/xtask bench --shape 2,4:2,300,64 --fp8 hopper --fp8-config wg128_192_s2_ia --once --no-sdpa > $R/${t}_d64.log 2>&1; echo "rc=$?" >> $R/${t}_d64.log
  timeout 40 compute-sanitizer --tool $t --error-exitcode 9 B/xtask bench --shape 2,4:2,300,256 --causal bottom-right --fp8 hopper --fp8-config wg128_96_s2_ia --once --no-sdpa > $R/${t}_d256.log 2>&1; echo "rc=$?" >> $R/${t}_d256.log
done
