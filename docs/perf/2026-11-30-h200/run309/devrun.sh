#!/bin/bash
# run 309 (H200): the final kernels against SDPA (train-bench, two calls), and synccheck/initcheck on
# the persistent backward test.
set -u
N=309; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack308.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
for round in 1 2; do
s=$(date +%s); timeout 150 N/xtask train-bench --shapes "4,16,4096,128" --iters 20 --varlen-seqs 0 --json $R/tb$round.json > $R/tb$round.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb$round.log
done
for tool in synccheck initcheck; do
s=$(date +%s); timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact backward::correctness_backward_persistent > $R/$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$tool.log
done
