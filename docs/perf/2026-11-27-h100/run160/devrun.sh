#!/bin/bash
# run 160: the landing build (HEAD a3fc1f1; all head dims, sm_80 + sm_90a): the whole GPU suite; compute-sanitizer (4 tools) on both small backward sets; attn-candle's CUDA tests; the two softcap tolerance misses of runs 156/159 replayed by seed.
set -u
N=160; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 300 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$?" >> $R/suite.log
for tool in memcheck racecheck synccheck initcheck; do
for t in backward::sanitize_backward_small backward_general::sanitize_backward_general_small; do
tag=$(echo $t | tr ':' '_')
timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact $t --test-threads 1 > $R/${tool}_$tag.log 2>&1; echo "rc=$?" >> $R/${tool}_$tag.log
done; done
export LD_LIBRARY_PATH="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout 200 N/candle --ignored --test-threads 1 > $R/candle.log 2>&1; echo "rc=$?" >> $R/candle.log
ATTN_TEST_SEED=4911349873347944647 timeout 100 N/gpu --ignored --exact backward_general::correctness_backward_features > $R/replay_features.log 2>&1; echo "rc=$?" >> $R/replay_features.log
ATTN_TEST_SEED=6714557127892243767 timeout 150 N/gpu --ignored --exact backward_general::correctness_backward_varlen > $R/replay_varlen.log 2>&1; echo "rc=$?" >> $R/replay_varlen.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
