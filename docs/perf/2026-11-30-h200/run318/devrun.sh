#!/bin/bash
# run 318 (H200): the final kernels (FlashAttention-2's 128-query backward tile at D = 64): the
# whole GPU suite, debug:: on the debug-kernels build, the four sanitizers on the small backward
# test (D = 64 and 256, both engines), and the D = 64 mma.sync backward against SDPA.
set -u
N=318; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; tar xJf target/pack${N}D.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
s=$(date +%s); timeout 270 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
s=$(date +%s); timeout 30 D/gpu --ignored debug:: > $R/debug.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/debug.log
for tool in memcheck racecheck synccheck initcheck; do
s=$(date +%s); timeout 40 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact backward::sanitize_backward_small > $R/$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$tool.log
done
s=$(date +%s); timeout 70 N/xtask train-bench --shapes "4,16,4096,64" --iters 20 --varlen-seqs 0 > $R/tb64_sdpa.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb64_sdpa.log
