#!/bin/bash
# run 250 (H200): tile dumps from the Hopper forward's debug entries (issue 15: "the tile
# oracle still works"): the debug-kernels build (D 64/128, sm_90a) of the Hopper debug tile
# work; the debug module's GPU tests (the mma.sync dumps and planted bug, and the new Hopper
# dumps against the tiled reference).
set -u
N=250; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 300 DBG/gpu --ignored --nocapture debug:: > $R/tests_debug.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_debug.log
