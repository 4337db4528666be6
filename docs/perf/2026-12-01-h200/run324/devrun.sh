#!/bin/bash
# run 324 (H200): N = FP8 D = 64 with two 128-row tiles (two consumers, 128 keys, with and
# without ping-pong) beside the 192-row default, chosen by a wave model. N: the FP8 tests that
# pin every tile, the walking-schedule test, the four sanitizers on the FP8 small shapes; then
# each D = 64 FP8 tile pinned (`bench --fp8 hopper --fp8-config`), our f16 in the same call.
set -u
N=324; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/packN.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi > $R/smi.txt 2>&1
s=$(date +%s); timeout 120 N/gpu --ignored fp8:: schedule::correctness_fp8 > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
for tool in memcheck racecheck synccheck initcheck; do
s=$(date +%s); timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact sanitize::sanitize_fp8_small_shapes > $R/$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$tool.log
done
for round in 1 2; do
for sc in "2,8,2048,64 none" "2,8,2048,64 bottom-right" "4,16,4096,64 none" "4,16,4096,64 bottom-right" "2,8,1024,64 none" "4,8,2048,64 none" "1,16,8192,64 none"; do
set -- $sc
for cfg in wg192_128_s2_ia wg128_128_s2_pp_ia wg128_128_s2_ia; do
timeout 30 N/xtask bench --shape $1 --causal $2 --fp8 hopper --fp8-config $cfg --no-sdpa --sustain-ms 300 --samples 150 --out-dir $R/b_${round}_$1_$2_$cfg > $R/b_${round}_$1_$2_$cfg.log 2>&1
done; done; done
