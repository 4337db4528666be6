#!/bin/bash
# run 325 (H200): N = FP8 causal launches ordered longest first across groups of 8 (head,
# batch) pairs at D <= 64 (hopper::causal_lpt_heads on 1-byte K/V), as the f16/bf16 launches
# are; O = run 324's build (one pair at a time). N: the FP8 tests and the four sanitizers on
# the FP8 small shapes; then O against N, alternating, both D = 64 FP8 tiles pinned, causal.
set -u
N=325; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/packP.txz -C $P; mv $P/N $P/O; tar xJf target/packN.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi > $R/smi.txt 2>&1
s=$(date +%s); timeout 120 N/gpu --ignored fp8:: schedule::correctness_fp8 > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
for tool in memcheck racecheck synccheck initcheck; do
s=$(date +%s); timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact sanitize::sanitize_fp8_small_shapes > $R/$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$tool.log
done
for round in 1 2; do
for sh in 2,8,2048,64 4,16,4096,64 1,16,8192,64 2,8,1024,64 8,16,1024,64; do
for cfg in wg192_128_s2_ia wg128_128_s2_pp_ia; do
for b in O N; do
timeout 30 $b/xtask bench --shape $sh --causal bottom-right --fp8 hopper --fp8-config $cfg --no-sdpa --sustain-ms 300 --samples 150 --out-dir $R/b_${round}_${b}_${sh}_$cfg > $R/b_${round}_${b}_${sh}_$cfg.log 2>&1
done; done; done; done
