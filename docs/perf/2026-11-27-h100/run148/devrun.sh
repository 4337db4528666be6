#!/bin/bash
# run 148: the final build (HEAD after 94a82c3; all head dims, sm_80 + sm_90a): the whole GPU suite; compute-sanitizer (4 tools) on the small backward sets (now with D = 256 on wgmma); train-bench at D = 256 and D = 128 against SDPA in the same call.
set -u
N=148; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 400 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$?" >> $R/suite.log
for tool in memcheck racecheck synccheck initcheck; do
for t in backward::sanitize_backward_small backward_general::sanitize_backward_general_small; do
tag=$(echo $t | tr ':' '_')
timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact $t --test-threads 1 > $R/${tool}_$tag.log 2>&1; echo "rc=$?" >> $R/${tool}_$tag.log
done; done
timeout 200 N/xtask train-bench --shapes "4,16,4096,256;2,16,8192,256;4,16,4096,128" --python python3 --iters 10 --varlen-seqs 0 --json $R/train.json > $R/train.log 2>&1; echo "rc=$?" >> $R/train.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
