#!/bin/bash
# run 173 (H200): probe — the cost of a stream-ordered allocation inside an event-timed region, with the default pool trimming at each sync (threshold 0) and keeping its memory (threshold max).
set -u
N=173; R=/tmp/r$N; mkdir -p $R
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $R/date.txt
nvcc -O2 -o /tmp/alloc target/probe/alloc.cu > $R/build.log 2>&1 && /tmp/alloc > $R/alloc.log 2>&1
cp target/probe/alloc.cu $R/
tar czf $OUT/logs$N.tgz -C /tmp r$N
