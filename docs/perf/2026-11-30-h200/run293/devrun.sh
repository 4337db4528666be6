#!/bin/bash
# run 293 (H200): the deterministic split tail with per-range rotated turns (Auto now splits
# deterministic launches whose turns rotate): the backward tests, memcheck/racecheck on the
# split-tail test, then train-bench --plain (deterministic: Auto vs its grid vs forced pieces).
set -u
N=293; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 300 N/gpu --ignored backward:: > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
for tool in memcheck racecheck; do
s=$(date +%s); timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact backward::correctness_backward_split_tail > $R/$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$tool.log
done
for round in 1 2; do
s=$(date +%s); timeout 150 N/xtask train-bench --plain --shapes "4,16,4096,256;4,16,4096,128;2,16,8192,128;2,16,8192,256;1,16,2048,128" --iters 20 --varlen-seqs 0 --python none > $R/tb$round.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb$round.log
done
