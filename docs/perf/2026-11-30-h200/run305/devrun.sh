#!/bin/bash
# run 305 (H200): K/V of a persistent CTA's next item loaded once the last block's dQ is staged (not
# its stage released); 16-byte dK/dV stores in the mma.sync backward too. backward:: tests,
# train-bench with SDPA (cuDNN/flash; our mma.sync rows), train-bench --plain, memcheck/racecheck.
set -u
N=305; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 200 N/gpu --ignored backward:: > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
s=$(date +%s); timeout 200 N/xtask train-bench --shapes "4,16,4096,128;4,16,4096,256" --iters 20 --varlen-seqs 0 --json $R/tb.json > $R/tb.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb.log
s=$(date +%s); timeout 100 N/xtask train-bench --plain --shapes "4,16,4096,128;8,16,2048,128;2,16,8192,128" --iters 20 --varlen-seqs 0 --python none > $R/tbp.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tbp.log
for tool in memcheck racecheck; do
s=$(date +%s); timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact backward::correctness_backward_persistent > $R/$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$tool.log
done
