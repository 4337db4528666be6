#!/bin/bash
# run 225 (H200): F = the final commit's xtask (train-bench on one DenseSet; kernels as run 224).
# train-bench with SDPA at 4,16,4096,128 and a varlen set: the refactored tool end to end, and
# the ALiBi backward on ALiBi's own forward.
set -u
N=225; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
s=$(date +%s); timeout 100 F/xtask train-bench --shapes "4,16,4096,128" --iters 20 --varlen-seqs 8 --json $R/train.json > $R/train.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train.log
