#!/bin/bash
# run 302 (H200): persistent wgmma backward (BwdItemQueue). backward:: tests, then train-bench --plain
# (default = persistent vs grid = one CTA per item), then memcheck/racecheck on the persistent test.
set -u
N=302; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 200 N/gpu --ignored backward:: > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
s=$(date +%s); timeout 150 N/xtask train-bench --plain --shapes "4,16,4096,128;8,16,2048,128;4,16,4096,64;4,16,4096,256;2,16,8192,128" --iters 20 --varlen-seqs 0 --python none > $R/tb.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb.log
for tool in memcheck racecheck; do
s=$(date +%s); timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact backward::correctness_backward_persistent > $R/$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$tool.log
done
