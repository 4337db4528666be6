#!/bin/bash
# run 266 (H200): run 264's debug build (D, = ae57d71's kernels): compute-sanitizer memcheck and
# racecheck on the backward tile-dump test (the dump writes of the mma.sync backward's debug
# entries), synccheck and initcheck too.
set -u
N=266; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack264.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
for tool in memcheck racecheck synccheck initcheck; do
  s=$(date +%s); timeout 200 compute-sanitizer --tool $tool D/gpu --ignored debug::correctness_backward_debug > $R/t_$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/t_$tool.log
done
