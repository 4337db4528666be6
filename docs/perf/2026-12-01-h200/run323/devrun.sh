#!/bin/bash
# run 323 (H200): N = the FP8 Hopper forward's key-split tiles for small grids (D = 64: 128
# keys, D = 128: 64 keys, four stages, as the f16/bf16 ones); O = main before it (c30f3ab's
# forward). N: the whole suite, the four sanitizers on sanitize_fp8_small_shapes; then O
# against N, alternating: `bench --fp8 auto --no-sdpa` on the seed shapes and on 1,8,512,128
# and 2,8,512,128 (causal and not), graph-timed where launches are short.
set -u
N=323; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/packO.txz -C $P; tar xJf target/packN.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi > $R/smi.txt 2>&1
s=$(date +%s); timeout 230 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
for tool in memcheck racecheck synccheck initcheck; do
s=$(date +%s); timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact sanitize::sanitize_fp8_small_shapes > $R/$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$tool.log
done
for round in 1 2; do for b in O N; do
s=$(date +%s)
timeout 60 $b/xtask bench --shapes seed --fp8 auto --no-sdpa --sustain-ms 300 --samples 100 --out-dir $R/b_${b}_$round > $R/bench_${b}_$round.log 2>&1
for sh in 1,8,512,128 2,8,512,128; do for c in none bottom-right; do
timeout 30 $b/xtask bench --shape $sh --causal $c --fp8 auto --no-sdpa --sustain-ms 300 --samples 100 --out-dir $R/b_${b}_${round}_${sh}_$c >> $R/bench_${b}_$round.log 2>&1
done; done
echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/bench_${b}_$round.log
done; done
