#!/bin/bash
# run 149: the final kernels (the deterministic turn wait/pass folded into bwd_wait_turn / bwd_pass_turn in both engines, and a proxy fence before D = 256's bulk reductions after the wait): the backward GPU tests and compute-sanitizer (4 tools) on the small backward sets.
set -u
N=149; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 300 N/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log
for tool in memcheck racecheck synccheck initcheck; do
for t in backward::sanitize_backward_small backward_general::sanitize_backward_general_small; do
tag=$(echo $t | tr ':' '_')
timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact $t --test-threads 1 > $R/${tool}_$tag.log 2>&1; echo "rc=$?" >> $R/${tool}_$tag.log
done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
