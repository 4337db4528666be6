#!/bin/bash
# run 311 (H200): after the review mend (no second decode per item, consumer loop re-indented, store_acc_row fallback under else): backward:: tests and train-bench --plain.
set -u
N=311; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 120 N/gpu --ignored backward:: > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
s=$(date +%s); timeout 60 N/xtask train-bench --plain --shapes "4,16,4096,128" --iters 20 --varlen-seqs 0 --python none > $R/tbp.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tbp.log
