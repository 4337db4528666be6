#!/bin/bash
# run 198 (H200): D = sinks in the split-KV merge (general split entries, decode kernel) and
# Auto's decode-like feature launches on the mma.sync split entries. D's whole GPU suite (with
# the new features::correctness_features_sinks_split_and_decode); serve-bench (its new
# "decode with sinks / ALiBi" set times the old engine choices in the same process);
# memcheck and racecheck on the new test.
set -u
N=198; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 250 D/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
s=$(date +%s); timeout 150 D/xtask serve-bench --json $R/serve.json > $R/serve.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve.log
for t in memcheck racecheck; do
  s=$(date +%s); timeout 120 compute-sanitizer --tool $t --error-exitcode 9 D/gpu --ignored --exact features::correctness_features_sinks_split_and_decode > $R/$t.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$t.log
done
