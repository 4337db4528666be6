#!/bin/bash
# run 352 (H200): N = the final code (run 350's binary). compute-sanitizer racecheck and
# synccheck on the FP8 split-KV test (the FP8 `_seq` entries' ticket flag and merge scratch in
# the dead Q tile, named barriers over the consumer warpgroups).
set -u
N=352; R=/tmp/r$N
mkdir -p $R /tmp/pN; tar xJf target/pack350.txz -C /tmp/pN
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
t racecheck_fp8 220 compute-sanitizer --tool racecheck --error-exitcode 3 /tmp/pN/350/gpu --ignored --exact fp8::correctness_fp8_hopper_split_kv
t synccheck_fp8 100 compute-sanitizer --tool synccheck --error-exitcode 3 /tmp/pN/350/gpu --ignored --exact fp8::correctness_fp8_hopper_split_kv
exit 0
