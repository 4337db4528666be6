#!/bin/bash
# run 217 (H200): A = ca8a255; N = A + the backward's row passes on 16-byte accesses (Δ: 16-byte
# loads of O and dO; the wgmma engine's dQ pass one CTA per tile, reading it in its own order;
# the mma.sync dQ pass 16-byte loads) and no zeroing of LSE₂ / Δ on the wgmma path.
# train-bench (no SDPA) alternating A, N; per-kernel times of one backward under ncu (N);
# backward tests and memcheck on N.
set -u
N=217; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 150 N/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
for t in backward::sanitize_backward_small backward_general::sanitize_backward_general_small; do
  s=$(date +%s); timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 N/gpu --ignored --exact $t > $R/memcheck_${t##*::}.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/memcheck_${t##*::}.log
done
for round in 1 2; do
  for b in A N; do
    s=$(date +%s); timeout 60 $b/xtask train-bench --shapes "4,16,4096,128;2,16,8192,128;4,16,4096,64" --python none --iters 10 --varlen-seqs 4 > $R/train_${b}_$round.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$round.log
  done
done
for b in A N; do
  s=$(date +%s); timeout 60 ncu --metrics gpu__time_duration.sum,dram__bytes.sum.per_second -k 'regex:prep|_dq_|delta' --launch-count 8 $b/xtask train-bench --shapes "4,16,4096,128" --python none --warmup 0 --iters 1 --varlen-seqs 0 > $R/ncu_times_$b.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ncu_times_$b.log
done
