#!/bin/bash
# run 233 (H200): F = 636dc2e (run 232's binaries). racecheck and initcheck on the FP8 walk
# test, which runs the stream-K tail at 7 and 11 CTAs (run 232's racecheck of the f16/bf16
# stream-K test did not finish in 90 s).
set -u
N=233; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack232.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
for tool in racecheck initcheck; do
  s=$(date +%s); timeout 150 compute-sanitizer --tool $tool F/gpu --ignored correctness_fp8_persistent > $R/t_$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/t_$tool.log
done
