#!/bin/bash
# run 210 (H200): F = 66a68e1 + dense launches without features split in the Hopper
# sequence/feature entries (pinned, or unpinned over 64 query rows on a small grid), and
# Engine::Auto keeps every dense launch of more than 64 query rows on the Hopper engine.
# serve-bench (chunked prefill: paged and dense caches); the whole GPU suite.
set -u
N=210; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 100 F/xtask serve-bench --json $R/serve_F.json >> $R/serve_F.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve_F.log
s=$(date +%s); timeout 420 F/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
