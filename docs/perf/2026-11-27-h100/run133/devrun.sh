#!/bin/bash
# run 133: D = 128's feature tile on 128 keys with ping-pong (017313d, dims 64/128, sm_90a) = N vs base (68ed425): features::, seqs::, hopper::, the NaN test on N; train-bench x2 alternating; serve-bench (varlen / paged prefill) x2; plain causal D = 128 on the 128-key tile with and without ping-pong (xtask bench --no-sdpa, bf16).
set -u
N=133; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $R/date.txt
timeout 300 N/gpu --ignored features:: seqs:: hopper:: correctness::correctness_nan_inputs_propagate > $R/tests_N.log 2>&1; echo "rc=$?" >> $R/tests_N.log
for i in 1 2; do
for b in base N; do
timeout 120 $b/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128" --python none --iters 10 --varlen-seqs 0 --json $R/train_${b}_$i.json > $R/train_${b}_$i.log 2>&1; echo "rc=$?" >> $R/train_${b}_$i.log
timeout 120 $b/xtask serve-bench --json $R/serve_${b}_$i.json > $R/serve_${b}_$i.log 2>&1; echo "rc=$?" >> $R/serve_${b}_$i.log
done
for s in 4,16,4096,128 2,16,8192,128; do for c in wg128_128_s2_ia wg128_128_s2_pp_ia; do
timeout 100 N/xtask bench --shape $s --causal bottom-right --dtype bf16 --no-sdpa --samples 100 --config $c --out-dir $R/bench_${s}_${c}_$i > $R/bench_${s}_${c}_$i.log 2>&1; echo "rc=$?" >> $R/bench_${s}_${c}_$i.log
done; done
done
tar czf $OUT/logs$N.tgz -C /tmp r$N
