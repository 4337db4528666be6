#!/bin/bash
# run 166: the key-split Hopper tile (wg64_128_s4_ia_kv: two consumers share a 64-row block and split its key tiles) at D <= 64, and the final deterministic-backward build (N, 32/64/128/256 builds): GPU tests on N; xtask bench of the S = 512 seed shapes (CUDA graphs, SDPA in the same process) with the default tile and the key-split tile, two rounds alternating; then the base build (f073d11) on a deterministic backward with 160 key blocks per head under a 60 s timeout (predicted to hang).
set -u
N=166; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 200 N/gpu --ignored hopper:: > $R/tests_hopper.log 2>&1; echo "rc=$?" >> $R/tests_hopper.log
timeout 120 N/gpu --ignored determinism_backward > $R/tests_det.log 2>&1; echo "rc=$?" >> $R/tests_det.log
for i in 1 2; do for cfg in default wg64_128_s4_ia_kv; do
for shape in 1,8,512,64 2,8,512,64; do for c in none bottom-right; do
if [ $cfg = default ]; then extra=""; else extra="--config $cfg"; fi
timeout 60 N/xtask bench --shape $shape --causal $c $extra --samples 200 --out-dir $R/b_${cfg}_${shape}_${c}_$i > $R/bench_${cfg}_${shape}_${c}_$i.log 2>&1
done; done; done; done
s=$(date +%s); timeout 60 base/xtask train-bench --shapes "1,2,20480,64" --python none --iters 2 --varlen-seqs 0 > $R/hang_base.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/hang_base.log
s=$(date +%s); timeout 60 N/xtask train-bench --shapes "1,2,20480,64" --python none --iters 2 --varlen-seqs 0 > $R/hang_N.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/hang_N.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
