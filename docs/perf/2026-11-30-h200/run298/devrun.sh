#!/bin/bash
# run 298 (H200): the debug-kernels build (ATTN_HEAD_DIMS=64,128, sm_90a): the debug:: tests
# (tile dumps of the forward engines and the mma.sync backward against the tiled reference).
set -u
N=298; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 300 N/gpu --ignored debug:: > $R/debug.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/debug.log
