#!/bin/bash
# run 204 (H200): A = 9546863 (ALiBi decode; E4M3 caches above D = 128 on the FMA stage) +
# serve-bench's D = 256 decode set; B = A + the tensor-core stage for E4M3 caches at every
# bucket (160-224 on 256-code rows), the FMA stage removed. B's whole GPU suite; serve-bench
# A/B alternating; memcheck on the wide-bf16-query E4M3 decode test (buckets up to 256).
set -u
N=204; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 260 B/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
for b in A B A B; do
  s=$(date +%s); timeout 55 $b/xtask serve-bench --json $R/serve_$b.json >> $R/serve_$b.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve_$b.log
done
s=$(date +%s); timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 B/gpu --ignored --exact seqs::correctness_seqs_decode_kv8_wide_bf16_queries > $R/memcheck.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/memcheck.log
