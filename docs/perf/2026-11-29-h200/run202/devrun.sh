#!/bin/bash
# run 202 (H200): F2 = F + a window bounds the decode split count (a short window no longer
# splits into empty splits). The features:: and seqs:: GPU tests; serve-bench; memcheck on
# the sinks/window test.
set -u
N=202; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 150 F2/gpu --ignored features:: seqs:: > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
s=$(date +%s); timeout 60 F2/xtask serve-bench --json $R/serve.json > $R/serve.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve.log
s=$(date +%s); timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 F2/gpu --ignored --exact features::correctness_features_sinks_split_and_decode > $R/memcheck.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/memcheck.log
