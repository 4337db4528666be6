#!/bin/bash
# run 130: softcap entries move part of the softmax's exponentials to the FMA pipe (exp2_fma). Tests on N (1/2 of the n-tiles): features::, the NaN test (now with softcap); train-bench base (68ed425) vs N (1/2) vs V14 (1/4) vs V34 (3/4), two rounds alternating.
set -u
N=130; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 200 N/gpu --ignored features:: correctness::correctness_nan_inputs_propagate > $R/tests_N.log 2>&1; echo "rc=$?" >> $R/tests_N.log
for i in 1 2; do
for b in base N V14 V34; do
timeout 120 $b/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128" --python none --iters 10 --varlen-seqs 0 --json $R/train_${b}_$i.json > $R/train_${b}_$i.log 2>&1; echo "rc=$?" >> $R/train_${b}_$i.log
done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
