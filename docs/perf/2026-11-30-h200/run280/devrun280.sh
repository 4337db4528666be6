#!/bin/bash
# run 280 (H200): the split tail in both modes (deterministic pieces take their dQ turns): the
# new test, the whole GPU suite, train-bench --plain (default and deterministic split where
# Auto splits, against BackwardSchedule::Grid, and SDPA), compute-sanitizer on the new test.
set -u
N=280; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 120 N/gpu --ignored correctness_backward_split_tail > $R/split_test.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/split_test.log
s=$(date +%s); timeout 250 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
timeout 100 N/xtask train-bench --plain --shapes "4,16,4096,128;4,16,4096,256;2,16,8192,128;1,4,2048,128" --iters 20 --varlen-seqs 0 > $R/tb_1.log 2>&1; echo "rc=$?" >> $R/tb_1.log
s=$(date +%s); timeout 60 compute-sanitizer --tool memcheck N/gpu --ignored correctness_backward_split_tail > $R/memcheck.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/memcheck.log
s=$(date +%s); timeout 80 compute-sanitizer --tool racecheck N/gpu --ignored correctness_backward_split_tail > $R/racecheck.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/racecheck.log
s=$(date +%s); timeout 60 compute-sanitizer --tool synccheck N/gpu --ignored correctness_backward_split_tail > $R/synccheck.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/synccheck.log
