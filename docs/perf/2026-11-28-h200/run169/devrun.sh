#!/bin/bash
# run 169 (H200): A/B of the deterministic backward with two dQ workspaces (N) against the session's base a28f24f (base), train-bench 3 rounds alternating; N's backward GPU tests; compute-sanitizer (racecheck, memcheck) on sanitize_hopper_engine (base build: every Hopper forward tile, the key-split tiles included).
set -u
N=169; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
SH="4,16,4096,64;4,16,4096,128;4,16,4096,256;2,16,8192,64"
for i in 1 2 3; do for b in base N; do
  s=$(date +%s); timeout 90 $b/xtask train-bench --shapes "$SH" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$i.log
done; done
s=$(date +%s); timeout 150 N/gpu --ignored backward > $R/tests_N.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_N.log
for tool in racecheck memcheck; do
  s=$(date +%s); timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 base/gpu --ignored --exact sanitize::sanitize_hopper_engine --test-threads 1 > $R/san_$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/san_$tool.log
done
tar czf $OUT/logs$N.tgz -C /tmp r$N
