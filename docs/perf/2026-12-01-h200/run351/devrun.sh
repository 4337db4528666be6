#!/bin/bash
# run 351 (H200): N = the final code (run 350's binary). compute-sanitizer memcheck on the
# FP8 split-KV test (the split workspace, tickets and merge of the FP8 `_seq` entries) and on
# the f16 split test.
set -u
N=351; R=/tmp/r$N
mkdir -p $R /tmp/pN; tar xJf target/pack350.txz -C /tmp/pN
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
t memcheck_fp8 200 compute-sanitizer --tool memcheck --error-exitcode 3 /tmp/pN/350/gpu --ignored --exact fp8::correctness_fp8_hopper_split_kv
t memcheck_split 150 compute-sanitizer --tool memcheck --error-exitcode 3 /tmp/pN/350/gpu --ignored --exact splits::correctness_split_kv
exit 0
