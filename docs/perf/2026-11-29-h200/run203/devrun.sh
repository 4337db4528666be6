#!/bin/bash
# run 203 (H200): G = f9e2cd4 + ALiBi in the decode kernel (per-row slopes, GQA packing with
# ALiBi). G's whole GPU suite; serve-bench; compute-sanitizer memcheck and racecheck on the
# sinks/ALiBi decode test.
set -u
N=203; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 260 G/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
s=$(date +%s); timeout 100 G/xtask serve-bench --json $R/serve.json > $R/serve.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve.log
for t in memcheck racecheck; do
  s=$(date +%s); timeout 100 compute-sanitizer --tool $t --error-exitcode 9 G/gpu --ignored --exact features::correctness_features_sinks_split_and_decode > $R/$t.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$t.log
done
