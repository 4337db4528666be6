#!/bin/bash
# run 282 (H200): the split-tail test with a deterministic D = 256 case (the consumers' own turns).
set -u
N=282; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
s=$(date +%s); timeout 120 N/gpu --ignored correctness_backward_split_tail > $R/split_test.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/split_test.log
s=$(date +%s); timeout 100 compute-sanitizer --tool racecheck N/gpu --ignored correctness_backward_split_tail > $R/racecheck.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/racecheck.log
