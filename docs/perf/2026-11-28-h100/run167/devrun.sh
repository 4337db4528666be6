#!/bin/bash
# run 167: HEAD 336ba1c + the D = 128 key-split sweep (all head dims, sm_90a): the whole GPU suite; xtask bench (CUDA graphs at S = 512, SDPA in the same process) of the D = 128 small grids with the default tile and the two D = 128 key-split tiles, two rounds; the D = 64 default around the key-split rule's boundary (4,8,512,64: 128 blocks of 128 rows; 1,8,1024,64: 64) with the 128-row tile pinned for comparison.
set -u
N=167; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 330 N/gpu --ignored > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
b() { timeout 60 N/xtask bench --shape $1 --causal $2 $3 --samples 200 --out-dir $R/b_$4 > $R/bench_$4.log 2>&1; }
for i in 1 2; do
for shape in 1,8,512,128 2,8,512,128 1,8,1024,128; do for c in none bottom-right; do
b $shape $c "" default_${shape}_${c}_$i
b $shape $c "--config wg64_128_s2_ia_kv" kv128_${shape}_${c}_$i
b $shape $c "--config wg64_64_s4_ia_kv" kv64_${shape}_${c}_$i
done; done; done
for shape in 4,8,512,64 1,8,1024,64; do for c in none bottom-right; do
b $shape $c "" default_${shape}_${c}_1
b $shape $c "--config wg128_128_s2_pp_ia" pp_${shape}_${c}_1
b $shape $c "--config wg64_128_s4_ia_kv" kv_${shape}_${c}_1
done; done
tar czf $OUT/logs$N.tgz -C /tmp r$N
