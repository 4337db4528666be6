#!/bin/bash
# run 115: mma.sync backward with 128-key CTAs up to D = 128 (phases B/C unrolled by 2 above D = 64): the whole GPU suite on N (all head dims), base (HEAD, 64 keys) vs N twice alternating, and N with SDPA's backends.
set -u
N=115; R=/tmp/r$N; P=/tmp/p$N; ROOT=$PWD
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 400 N/gpu --ignored > $R/suite_N.log 2>&1; echo "rc=$?" >> $R/suite_N.log
for i in 1 2; do
for b in base N; do
timeout 150 $b/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128" --python none --iters 10 --varlen-seqs 0 --json $R/train_${b}_$i.json > $R/train_${b}_$i.log 2>&1; echo "rc=$?" >> $R/train_${b}_$i.log
done; done
timeout 200 N/xtask train-bench --shapes "4,16,4096,64;4,16,4096,128" --iters 10 --varlen-seqs 0 --json $R/train_N_sdpa.json > $R/train_N_sdpa.log 2>&1; echo "rc=$?" >> $R/train_N_sdpa.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
