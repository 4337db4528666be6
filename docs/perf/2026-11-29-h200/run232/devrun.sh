#!/bin/bash
# run 232 (H200): F = 636dc2e (the final library code: the stream-K tail on the walking
# entries). The whole GPU suite, attn-candle's CUDA tests, racecheck and synccheck on the
# stream-K test.
set -u
N=232; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 260 F/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
export LD_LIBRARY_PATH="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
s=$(date +%s); timeout 60 F/candle --ignored --test-threads 1 > $R/candle.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/candle.log
for tool in racecheck synccheck; do
  s=$(date +%s); timeout 90 compute-sanitizer --tool $tool F/gpu --ignored stream_k > $R/t_$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/t_$tool.log
done
