#!/bin/bash
# run 281 (H200): the landing build (Auto no longer splits deterministic launches): the backward
# tests, and train-bench --plain for the deterministic / default ratios.
set -u
N=281; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 150 N/gpu --ignored backward > $R/backward_tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/backward_tests.log
timeout 100 N/xtask train-bench --plain --shapes "4,16,4096,128;4,16,4096,256;4,16,4096,64" --iters 20 --varlen-seqs 0 --python none > $R/tb_1.log 2>&1; echo "rc=$?" >> $R/tb_1.log
