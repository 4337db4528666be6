#!/bin/bash
# run 188 (H200): A = n3 (159f996's kernels: the FMA stage at D ≥ 160), B = the f16/bf16
# tensor-core decode stage at D = 192/256 with two warps (160 and 224 on padded rows).
# Graph-timed decode A/B (two rounds, alternating); SDPA against B; B's whole GPU suite;
# memcheck and racecheck on small D = 160/256 decode launches.
set -u
N=188; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack187.txz -C $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
# pack187's B (n3) is this run's A.
rm -rf A; mv B A3; mv C B
SH="1,32,1x8192,256 64,16:8,1x4096,256 64,32:8,1x4096,256 8,32:8,1x4096,256 64,32:8,1x4096,192 1,32,1x8192,160 64,32:8,1x4096,224 64,32:8,1x4096,128"
for i in 1 2; do for b in A3 B; do for sh in $SH; do
  n=$(echo $sh | tr ',:' '__'); timeout 60 $b/xtask bench --shape "$sh" --dtype both --samples 200 --timing graph --no-sdpa --out-dir $R/ab_${b}_${n}_$i > $R/ab_${b}_${n}_$i.log 2>&1
done; done; done
for sh in "1,32,1x8192,256" "64,16:8,1x4096,256" "64,32:8,1x4096,256" "8,32:8,1x4096,256" "64,32:8,1x4096,192" "1,32,1x8192,160"; do
  n=$(echo $sh | tr ',:' '__'); timeout 120 B/xtask bench --shape "$sh" --dtype f16 --samples 200 --timing graph --out-dir $R/sdpa_$n > $R/sdpa_$n.log 2>&1
done
for t in memcheck racecheck; do for sh in "2,8:2,1x300,256" "2,8:2,3x300,160" "1,4,1x1000,224" "2,8:1,5x700,192"; do
  n=$(echo $sh | tr ',:' '__'); timeout 120 compute-sanitizer --tool $t --error-exitcode 9 B/xtask bench --shape "$sh" --dtype both --once --no-sdpa --splits 3 > $R/${t}_$n.log 2>&1; echo "rc=$?" >> $R/${t}_$n.log
done; done
s=$(date +%s); timeout 300 B/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
