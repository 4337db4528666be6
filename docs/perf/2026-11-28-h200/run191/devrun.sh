#!/bin/bash
# run 191 (H200): A = c554b54 (the session's base), B = the in-kernel V transpose with
# compile-time unit offsets (two instructions per address), a flat stage walk in the walking
# entries, and the 192-key FP8 tiles at D = 128. B's FP8 tests; FP8 A/B (bench large and
# D = 256, B's 192-key tiles on the D = 128 shapes), two rounds; cuDNN FP8 SDPA before and
# after; B's whole GPU suite; sanitizers on small FP8 launches; ncu on B.
set -u
N=191; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
python3 -m pip install --no-deps --target /tmp/pyfp8 target/whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?" >> $R/pip.log
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 120 B/gpu --ignored fp8 > $R/fp8_tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/fp8_tests.log
FP8SH="4,16,4096,64 4,16,4096,128 4,16,4096,128,causal 1,16,16384,128 4,16,4096,256"
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 100 $FP8SH > $R/cudnn_fp8_1.json 2> $R/cudnn_fp8_1.err
for i in 1 2; do
  for b in A B; do
    s=$(date +%s); timeout 90 $b/xtask bench --shapes large --dtype f16 --fp8 hopper --samples 100 --no-sdpa --out-dir $R/ab_${b}_$i > $R/ab_${b}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ab_${b}_$i.log
    s=$(date +%s); timeout 60 $b/xtask bench --shape 4,16,4096,256 --dtype f16 --fp8 hopper --samples 100 --no-sdpa --out-dir $R/ab256_${b}_$i > $R/ab256_${b}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ab256_${b}_$i.log
  done
  for cfg in wg128_192_s2_ia wg128_192_s2_pp_ia; do for sh in 4,16,4096,128 1,16,16384,128; do
    n=$(echo $sh | tr ',' '_'); timeout 60 B/xtask bench --shape $sh --dtype f16 --fp8 hopper --fp8-config $cfg --samples 100 --no-sdpa --out-dir $R/t_${cfg}_${n}_$i > $R/t_${cfg}_${n}_$i.log 2>&1
  done; timeout 60 B/xtask bench --shape 4,16,4096,128 --causal bottom-right --dtype f16 --fp8 hopper --fp8-config $cfg --samples 100 --no-sdpa --out-dir $R/t_${cfg}_causal_$i > $R/t_${cfg}_causal_$i.log 2>&1; done
done
PYTHONPATH=/tmp/pyfp8 timeout 60 python3 $ROOT/scripts/cudnn_fp8_sdpa.py --samples 100 $FP8SH > $R/cudnn_fp8_2.json 2> $R/cudnn_fp8_2.err
s=$(date +%s); timeout 260 B/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
for t in racecheck synccheck memcheck; do for sh in "2,4:2,300,128" "1,2,333,256" "1,4,200,64"; do
  n=$(echo $sh | tr ',:' '__'); timeout 40 compute-sanitizer --tool $t --error-exitcode 9 B/xtask bench --shape "$sh" --fp8 hopper --once --no-sdpa > $R/${t}_$n.log 2>&1; echo "rc=$?" >> $R/${t}_$n.log
done; timeout 40 compute-sanitizer --tool $t --error-exitcode 9 B/xtask bench --shape 2,4:2,300,128 --fp8 hopper --fp8-config wg128_192_s2_ia --once --no-sdpa > $R/${t}_192.log 2>&1; echo "rc=$?" >> $R/${t}_192.log; done
s=$(date +%s); timeout 60 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters --import-source no -k 'regex:attn_fwdh8_f16_d128_wg128_128_s2_ia_full$' --launch-skip 0 --launch-count 1 --export $R/fp8 B/xtask bench --shape 4,16,4096,128 --fp8 hopper --once --no-sdpa > $R/ncu.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ncu.log
timeout 30 ncu --import $R/fp8.ncu-rep --page details > $R/ncu_details.txt 2>&1
timeout 30 ncu --import $R/fp8.ncu-rep --page source --csv --print-source sass > $R/source.csv 2> $R/source.err; gzip $R/source.csv
