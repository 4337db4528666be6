#!/bin/bash
# run 187 (H200): A = HEAD's kernels (dims 96/128/256), B = bucket 96's decode on the
# tensor-core stage of 128 (padded rows) + DecodeTcSoftmax::finish_rows (all dims, sm_80 +
# sm_90a). Graph-timed decode A/B at D = 96 (two rounds, alternating); SDPA against B at
# D = 96 and against the FMA stage at D = 192/256 GQA; B's whole GPU suite; memcheck and
# racecheck on small D = 96 decode launches.
set -u
N=187; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for i in 1 2; do for b in A B; do for sh in "1,32,1x8192,96" "64,32:8,1x4096,96" "8,32:8,1x4096,96" "1,32,1x8192,128"; do
  n=$(echo $sh | tr ',:' '__'); timeout 60 $b/xtask bench --shape "$sh" --dtype both --samples 200 --timing graph --no-sdpa --out-dir $R/ab_${b}_${n}_$i > $R/ab_${b}_${n}_$i.log 2>&1
done; done; done
for sh in "1,32,1x8192,96" "64,32:8,1x4096,96" "64,16:8,1x4096,256" "64,32:8,1x4096,256" "8,32:8,1x4096,256" "64,32:8,1x4096,192"; do
  n=$(echo $sh | tr ',:' '__'); timeout 120 B/xtask bench --shape "$sh" --dtype f16 --samples 200 --timing graph --out-dir $R/sdpa_$n > $R/sdpa_$n.log 2>&1
done
for t in memcheck racecheck; do for sh in "2,8:2,1x300,96" "2,8:2,3x300,96" "1,4,1x1000,96"; do
  n=$(echo $sh | tr ',:' '__'); timeout 120 compute-sanitizer --tool $t --error-exitcode 9 B/xtask bench --shape "$sh" --dtype both --once --no-sdpa --splits 3 > $R/${t}_$n.log 2>&1; echo "rc=$?" >> $R/${t}_$n.log
done; done
s=$(date +%s); timeout 300 B/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
