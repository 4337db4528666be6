#!/bin/bash
# run 201 (H200): F = 0291a82 + GQA-packed decode with a window (the last packed row's
# window). F's whole GPU suite; serve-bench on E (0291a82) and F, alternating; compute-sanitizer
# (memcheck, racecheck, synccheck) on the sinks/window test.
set -u
N=201; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 250 F/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
for b in E F E F; do
  s=$(date +%s); timeout 100 $b/xtask serve-bench --json $R/serve_$b.json >> $R/serve_$b.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve_$b.log
done
for t in memcheck racecheck synccheck; do
  s=$(date +%s); timeout 120 compute-sanitizer --tool $t --error-exitcode 9 F/gpu --ignored --exact features::correctness_features_sinks_split_and_decode > $R/$t.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$t.log
done
