#!/bin/bash
# run 156: deterministic backward — W: the dQ writer frees the staging once its reduce has read it, and passes the turn after the completion (before: both after the completion); base = HEAD 6722776. train-bench alternating, three times; the backward GPU tests on W (64/128 build).
set -u
N=156; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for i in 1 2 3; do for b in base W; do
timeout 120 $b/xtask train-bench --shapes "4,16,4096,64;2,16,8192,64;4,16,4096,128" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1
done; done
timeout 200 W/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
