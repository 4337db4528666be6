#!/bin/bash
# run 197 (H200): C = four transposing producer warps (thread 0 also issues the TMA loads),
# a base register per swizzle-chunk value (unit offsets in the immediates), one unit in flight,
# against A = three transposers + a TMA warp (797b9e3), default FP8 tiles, two rounds
# alternating; cuDNN FP8 before and after; C's whole GPU suite; sanitizers and ncu on C.
set -u
N=197; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
python3 -m pip install --no-deps --target /tmp/pyfp8 target/whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?" >> $R/pip.log
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
FP8SH="4,16,4096,64 4,16,4096,64,causal 4,16,4096,128 4,16,4096,128,causal 1,16,16384,128 4,16,4096,256"
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 100 $FP8SH > $R/cudnn_fp8_1.json 2> $R/cudnn_fp8_1.err
CASES="4,16,4096,128:none:wg128_192_s2_ia 4,16,4096,128:bottom-right:wg128_192_s2_pp_ia 1,16,16384,128:none:wg128_192_s2_ia 4,16,4096,64:none:wg192_128_s2_ia 4,16,4096,64:bottom-right:wg192_128_s2_ia 4,16,4096,256:none:wg128_96_s2_pp_ia"
for i in 1 2; do for b in A C; do for cs in $CASES; do
  sh=${cs%%:*}; rest=${cs#*:}; c=${rest%%:*}; cfg=${rest#*:}
  timeout 40 $b/xtask bench --shape $sh --causal $c --dtype f16 --fp8 hopper --fp8-config $cfg --samples 100 --no-sdpa --out-dir $R/${b}_${sh}_${c}_$i > $R/${b}_${sh}_${c}_$i.log 2>&1
done; done; done
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 100 $FP8SH > $R/cudnn_fp8_2.json 2> $R/cudnn_fp8_2.err
s=$(date +%s); timeout 230 C/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
s=$(date +%s); timeout 60 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters --import-source no -k 'regex:attn_fwdh8_f16_d128_wg128_192_s2_ia_full$' --launch-skip 0 --launch-count 1 --export $R/fp8 C/xtask bench --shape 4,16,4096,128 --fp8 hopper --fp8-config wg128_192_s2_ia --once --no-sdpa > $R/ncu.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ncu.log
timeout 30 ncu --import $R/fp8.ncu-rep --page details > $R/ncu_details.txt 2>&1
timeout 30 ncu --import $R/fp8.ncu-rep --page source --csv --print-source sass > $R/source.csv 2> $R/source.err; gzip $R/source.csv
for t in racecheck synccheck memcheck; do for sc in "1,16:4,1100,128:none:wg128_192_s2_ia" "2,4:2,333,128:bottom-right:wg128_192_s2_pp_ia" "2,4:2,333,64:none:wg192_128_s2_ia"; do
  sh=${sc%%:*}; rest=${sc#*:}; c=${rest%%:*}; cfg=${rest#*:}
  timeout 40 compute-sanitizer --tool $t --error-exitcode 9 C/xtask bench --shape $sh --causal $c --fp8 hopper --fp8-config $cfg --once --no-sdpa > $R/${t}_${sh}_$c.log 2>&1; echo "rc=$?" >> $R/${t}_${sh}_$c.log
done; done
