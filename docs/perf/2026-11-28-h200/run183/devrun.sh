#!/bin/bash
# run 183 (H200): F2 = F (679eaa7) + the mma.sync backward's interior dQ additions as 16-byte reductions (lanes t, t^1 trade halves) on sm_90: train-bench F / F2 two rounds alternating; F2's whole GPU suite; compute-sanitizer memcheck and racecheck on backward::sanitize_backward_small.
set -u
N=183; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack181.txz -C $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
SH="4,16,4096,128;4,16,4096,64;2,16,8192,128"
for i in 1 2; do for b in F F2; do
  timeout 100 $b/xtask train-bench --shapes "$SH" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1; echo "rc=$?" >> $R/train_${b}_$i.log
done; done
s=$(date +%s); timeout 280 F2/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
for tool in memcheck racecheck; do
  s=$(date +%s); timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 F2/gpu --ignored --exact backward::sanitize_backward_small --test-threads 1 > $R/san_$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/san_$tool.log
done
tar czf $OUT/logs$N.tgz -C /tmp r$N
