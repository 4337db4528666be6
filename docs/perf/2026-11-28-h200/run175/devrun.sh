#!/bin/bash
# run 175 (H200): train-bench with SDPA's backends in the same process on F (run 174's build: the kept backward workspace and the fence-free deterministic turn pass), for the backward's ratio to cuDNN after those changes.
set -u
N=175; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack174.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 150 F/xtask train-bench --shapes "4,16,4096,128;4,16,4096,64;2,16,8192,128" --iters 10 --varlen-seqs 0 > $R/train.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
