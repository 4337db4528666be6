#!/bin/bash
# run 205 (H200): A = run 204's A (E4M3 caches above D = 128 on the FMA stage); C = run 204's
# B with four warps and 64-key stages for E4M3 rows of 256 (two warps ran 1.16x A's time).
# C's seqs:: and features:: GPU tests; serve-bench A/C alternating; memcheck on the
# wide-bf16-query E4M3 decode test.
set -u
N=205; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 200 C/gpu --ignored seqs:: features:: > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
for b in A C A C; do
  s=$(date +%s); timeout 55 $b/xtask serve-bench --json $R/serve_$b.json >> $R/serve_$b.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve_$b.log
done
s=$(date +%s); timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 C/gpu --ignored --exact seqs::correctness_seqs_decode_kv8_wide_bf16_queries > $R/memcheck.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/memcheck.log
