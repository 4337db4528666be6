#!/bin/bash
# run 179 (H200): the mma.sync backward, base (57355b2) / N1 (run 177's instruction diet) / N2 (N1 + phase C before phase B, one barrier fewer per block): train-bench 3 rounds rotating, one SDPA round on N2; the backward tests on N2 (64/128 sm_90a build).
set -u
N=179; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack177.txz -C $P; tar xJf target/pack179.txz -C $P; mv $P/N $P/N1; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
SH="4,16,4096,128;4,16,4096,64;2,16,8192,128"
for i in 1 2 3; do for b in base N1 N2; do
  timeout 100 $b/xtask train-bench --shapes "$SH" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1; echo "rc=$?" >> $R/train_${b}_$i.log
done; done
timeout 150 N2/xtask train-bench --shapes "4,16,4096,128;4,16,4096,64" --iters 10 --varlen-seqs 0 > $R/train_N2_sdpa.log 2>&1; echo "rc=$?" >> $R/train_N2_sdpa.log
cd N2
for t in backward::correctness_backward_seed_shapes_and_masks backward::correctness_backward_tails_gqa_and_head_dims backward_general::correctness_backward_features backward_general::correctness_backward_varlen backward_general::determinism_backward_general_is_bitwise_reproducible; do
  s=$(date +%s); timeout 120 ./gpu --ignored --exact $t --test-threads 1 > $R/test_${t##*::}.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/test_${t##*::}.log
done
cd $P
for tool in racecheck memcheck synccheck; do
  s=$(date +%s); timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 N2/xtask train-bench --shapes "1,2,300,64;1,3,200,128" --python none --warmup 0 --iters 1 --varlen-seqs 0 > $R/san_$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/san_$tool.log
done
tar czf $OUT/logs$N.tgz -C /tmp r$N
