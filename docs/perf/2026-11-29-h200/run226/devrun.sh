#!/bin/bash
# run 226 (H200): F = d2176c6 + train-bench's loops (ours and SDPA's) each after 0.5 s of their
# own calls (sustained clocks); kernels as run 224. The feature costs and the SDPA ratios at
# D = 128 and 64.
set -u
N=226; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
s=$(date +%s); timeout 150 F/xtask train-bench --shapes "4,16,4096,128;4,16,4096,64" --iters 20 --varlen-seqs 0 --json $R/train.json > $R/train.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train.log
