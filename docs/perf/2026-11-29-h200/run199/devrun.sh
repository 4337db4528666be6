#!/bin/bash
# run 199 (H200): D = 884821f (sinks in split-KV). Replays run 198's seqs::correctness_seqs_paged
# tolerance miss by its seed on D and on A (the session's base kernels, 797b9e3); D's fixed
# decode-refusal test and the new sinks test; serve-bench (its decode-with-sinks/ALiBi set);
# attn-candle's CUDA tests on D's kernels.
set -u
N=199; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for b in D A; do for i in 1 2; do
  ATTN_TEST_SEED=15590579747618180439 timeout 60 $b/gpu --ignored --exact seqs::correctness_seqs_paged > $R/replay_${b}_$i.log 2>&1; echo "rc=$?" >> $R/replay_${b}_$i.log
done; done
timeout 60 D/gpu --ignored seqs::validation_decode_refusals_write_nothing features::correctness_features_sinks_split_and_decode seqs::correctness_seqs_general_split > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log
s=$(date +%s); timeout 200 D/xtask serve-bench --json $R/serve.json > $R/serve.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve.log
export LD_LIBRARY_PATH="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
s=$(date +%s); timeout 200 D/candle --ignored --test-threads 1 > $R/candle.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/candle.log
