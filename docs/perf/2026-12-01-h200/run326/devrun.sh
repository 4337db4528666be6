#!/bin/bash
# run 326 (H200): N = the mma.sync backward's fragment addresses split by the swizzle (run 321's
# patch) at every head dim but 128, which keeps the whole swz and its peeled first k-step; O =
# run 325's build (a9a54be's kernels). N: the whole suite and the four sanitizers on the small
# backward test; then O against N, alternating, `train-bench --python none` at D = 64, 128, 256.
set -u
N=326; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/packQ.txz -C $P; mv $P/N $P/O; tar xJf target/packN.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi > $R/smi.txt 2>&1
s=$(date +%s); timeout 230 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
for tool in memcheck racecheck synccheck initcheck; do
s=$(date +%s); timeout 30 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact backward::sanitize_backward_small > $R/$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$tool.log
done
for round in 1 2; do for b in O N; do
s=$(date +%s); timeout 70 $b/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128;4,16,4096,256" --iters 20 --sustain-ms 500 --varlen-seqs 0 --python none > $R/tb_${b}_$round.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb_${b}_$round.log
done; done
