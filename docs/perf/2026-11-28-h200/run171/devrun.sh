#!/bin/bash
# run 171 (H200): the tensor-core decode stage for f16/bf16 caches (N, HEAD + uncommitted decode_tc changes) against the session's base a28f24f (base): bench decode (f16, bf16) with SDPA, 2 rounds alternating; serve-bench (paged decode, E4M3, copy bandwidth) on both; N's whole GPU suite; compute-sanitizer memcheck and racecheck on N's decode tests.
set -u
N=171; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for i in 1 2; do for b in base N; do
  timeout 60 $b/xtask bench --shapes decode --dtype both --samples 200 --out-dir $R/dec_${b}_$i > $R/dec_${b}_$i.log 2>&1; echo "rc=$?" >> $R/dec_${b}_$i.log
done; done
for b in N base; do s=$(date +%s); timeout 100 $b/xtask serve-bench --json $R/serve_$b.json > $R/serve_$b.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve_$b.log; done
s=$(date +%s); timeout 280 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
for tool in memcheck racecheck; do
  s=$(date +%s); timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact seqs::sanitize_seqs_decode_corrupt_indices --test-threads 1 > $R/san_$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/san_$tool.log
done
tar czf $OUT/logs$N.tgz -C /tmp r$N
