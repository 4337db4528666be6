#!/bin/bash
# run 244 (H200): the landing build F (91285cb's kernels: sm_80 + sm_90a, every head dim):
# the whole GPU suite; compute-sanitizer (memcheck, racecheck, synccheck) on the small
# backward set (deterministic D = 256 causal included); train-bench (no SDPA) at
# 4,16,4096,256 and 4,16,4096,128 for the deterministic ratios.
set -u
N=244; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 300 F/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
for tool in memcheck racecheck synccheck; do
  s=$(date +%s); timeout 100 compute-sanitizer --tool $tool F/gpu --ignored --exact backward::sanitize_backward_small --test-threads 1 > $R/san_bwd_$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/san_bwd_$tool.log
done
s=$(date +%s); timeout 100 F/xtask train-bench --shapes "4,16,4096,256;4,16,4096,128" --iters 20 --varlen-seqs 0 --python none --json $R/train.json > $R/train.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train.log
