#!/bin/bash
# run 310 (H200): the backward against SDPA with a longer sustained load before every timing loop
# on both sides (train-bench --sustain-ms 3000, then 1500): does cuDNN still change clock state
# within its samples, and where does the ratio settle?
set -u
N=310; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
for ms in 3000 1500; do
s=$(date +%s); timeout 250 N/xtask train-bench --shapes "4,16,4096,128" --iters 20 --varlen-seqs 0 --sustain-ms $ms --json $R/tb$ms.json > $R/tb$ms.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb$ms.log
done
