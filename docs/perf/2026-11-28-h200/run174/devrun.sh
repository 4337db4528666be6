#!/bin/bash
# run 174 (H200): F = 5b3ac41 + the backward's kept workspace (BwdWorkspace) + the deterministic turn pass without per-thread fences, against base a28f24f (the same backward code as 5b3ac41): train-bench 3 rounds alternating (D 64/128/256; the default mode's change isolates the workspace, the deterministic mode's the fences); F's backward GPU tests (determinism included); compute-sanitizer memcheck and racecheck on F's small backward set.
set -u
N=174; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
SH="4,16,4096,64;4,16,4096,128;4,16,4096,256"
for i in 1 2 3; do for b in base F; do
  s=$(date +%s); timeout 60 $b/xtask train-bench --shapes "$SH" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$i.log
done; done
s=$(date +%s); timeout 150 F/gpu --ignored backward > $R/tests_F.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_F.log
for tool in memcheck racecheck; do
  s=$(date +%s); timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 F/gpu --ignored --exact backward::sanitize_backward_small --test-threads 1 > $R/san_$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/san_$tool.log
done
tar czf $OUT/logs$N.tgz -C /tmp r$N
