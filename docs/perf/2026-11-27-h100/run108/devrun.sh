#!/bin/bash
# run 108: compute-sanitizer (4 tools) on the final build: the small backward set (three stages at D = 64) and the FP8 small shapes (the cvt NaN fix).
set -u
N=108; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack107.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $R/date.txt
for tool in ${TOOLS:-memcheck racecheck}; do
for t in backward::sanitize_backward_small sanitize::sanitize_fp8_small_shapes; do
tag=$(echo $t | tr ':' '_')
timeout 140 compute-sanitizer --tool $tool --error-exitcode 9 gpu/gpu --ignored --exact $t --test-threads 1 > $R/${tool}_$tag.log 2>&1; echo "rc=$?" >> $R/${tool}_$tag.log
done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
