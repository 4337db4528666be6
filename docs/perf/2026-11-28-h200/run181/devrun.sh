#!/bin/bash
# run 181 (H200): the landing build F (679eaa7: all head dims, sm_80 + sm_90a): the whole GPU suite; compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on the backward's sanitize tests.
set -u
N=181; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 280 F/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
for tool in memcheck racecheck synccheck initcheck; do for t in backward::sanitize_backward_small backward_general::sanitize_backward_general_small; do
  s=$(date +%s); timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 F/gpu --ignored --exact $t --test-threads 1 > $R/san_${tool}_${t##*::}.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/san_${tool}_${t##*::}.log
done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
