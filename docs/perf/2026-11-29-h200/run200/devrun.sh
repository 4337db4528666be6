#!/bin/bash
# run 200 (H200): E = 884821f + GQA-packed decode rows with sinks (each row reads its query
# head's sink; split 0's partial adds it). E's whole GPU suite; serve-bench; compute-sanitizer
# (memcheck, racecheck, synccheck) on the sinks test.
set -u
N=200; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 250 E/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
s=$(date +%s); timeout 150 E/xtask serve-bench --json $R/serve.json > $R/serve.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve.log
for t in memcheck racecheck synccheck; do
  s=$(date +%s); timeout 120 compute-sanitizer --tool $t --error-exitcode 9 E/gpu --ignored --exact features::correctness_features_sinks_split_and_decode > $R/$t.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$t.log
done
