#!/bin/bash
# run 322 (H200): N = the mma.sync backward's first k-step peeled in phases A and C of the plain
# entries (next/peel_first_kstep.patch); O = main (c30f3ab, run 319's kernels). N: the whole
# suite and the four sanitizers on the small backward test; then O against N, alternating,
# `train-bench --python none` at D = 64, 128, 256.
set -u
N=322; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/packO.txz -C $P; tar xJf target/packN.txz -C $P
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
