#!/bin/bash
# run 155: D 64/128 backward — F: the dQ staging's proxy fence after dK's wait; FL: F + LSE₂/Δ pairs loaded into registers while the GEMMs run; base = HEAD 6722776. train-bench rotating, three times; the backward GPU tests on FL (64/128 build).
set -u
N=155; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for i in 1 2 3; do for b in base F FL; do
timeout 120 $b/xtask train-bench --shapes "4,16,4096,128;2,16,8192,128;4,16,4096,64" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1
done; done
timeout 200 FL/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
