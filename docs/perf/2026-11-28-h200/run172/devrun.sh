#!/bin/bash
# run 172 (H200): serve-bench (varlen, paged decode, E4M3 cache, copy bandwidth) on N (the tensor-core decode stage for f16/bf16 caches) and base a28f24f, 30 samples each (run 171's 100-sample runs hit their 100 s timeout before the decode rows).
set -u
N=172; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack171.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for b in N base; do s=$(date +%s); timeout 150 $b/xtask serve-bench --samples 30 --warmup 5 --json $R/serve_$b.json > $R/serve_$b.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve_$b.log; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
