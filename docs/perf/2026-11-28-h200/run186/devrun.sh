#!/bin/bash
# run 186 (H200): A = HEAD's kernels (+ bench --timing), B = the split combine's parallel L2 reads
# and DecodeTcSoftmax::finish_rows. Graph-timed decode A/B (two rounds, alternating), cuDNN once;
# B's split counts 4/8 for the one-row decode; decode at D = 96 and 256 (FMA stage) against
# SDPA; B's seqs and splits GPU tests (dims 96/128/256 built).
set -u
N=186; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 120 A/xtask bench --shapes decode --dtype f16 --samples 200 --timing graph --out-dir $R/sdpa_A > $R/sdpa_A.log 2>&1
for i in 1 2; do for b in A B; do
  timeout 60 $b/xtask bench --shapes decode --dtype both --samples 200 --timing graph --no-sdpa --out-dir $R/dec_${b}_$i > $R/dec_${b}_$i.log 2>&1
done; done
for s in 4 8 16; do for b in A B; do
  timeout 60 $b/xtask bench --shapes decode --dtype f16 --samples 200 --timing graph --no-sdpa --splits $s --out-dir $R/splits_${b}_$s > $R/splits_${b}_$s.log 2>&1
done; done
for sh in "1,32,1x8192,256" "64,16/8,1x4096,256" "64,32/8,1x4096,256" "1,32,1x8192,96" "64,32/8,1x4096,96"; do
  n=$(echo $sh | tr ',/' '__'); timeout 120 B/xtask bench --shape "$sh" --dtype f16 --samples 200 --timing graph --out-dir $R/fma_$n > $R/fma_$n.log 2>&1
done
s=$(date +%s); timeout 240 B/gpu --ignored seqs:: splits:: > $R/tests_B.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_B.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
