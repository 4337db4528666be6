#!/bin/bash
# run 279 (H200): the wgmma backward's split tail (BackwardSchedule). The new test, the whole
# GPU suite, train-bench --plain (default = split where Auto splits, against BackwardSchedule::Grid
# in the same process, and SDPA), then compute-sanitizer on the new test.
set -u
N=279; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 120 N/gpu --ignored correctness_backward_split_tail > $R/split_test.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/split_test.log
s=$(date +%s); timeout 260 N/gpu --ignored --test-threads 1 > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
for round in 1 2; do
  timeout 150 N/xtask train-bench --plain --shapes "4,16,4096,128;2,16,8192,128;1,16,16384,128;4,16,4096,64;4,16,4096,256;1,4,2048,128" --iters 20 --varlen-seqs 0 > $R/tb_$round.log 2>&1
  echo "rc=$?" >> $R/tb_$round.log
done
s=$(date +%s); timeout 100 compute-sanitizer --tool memcheck N/gpu --ignored correctness_backward_split_tail > $R/memcheck.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/memcheck.log
s=$(date +%s); timeout 100 compute-sanitizer --tool racecheck N/gpu --ignored correctness_backward_split_tail > $R/racecheck.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/racecheck.log
