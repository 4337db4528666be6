#!/bin/bash
# run 297 (H200): train-bench with SDPA (cuDNN / flash backends) at 4,16,4096,128 and
# 4,16,4096,256: the backward's standing against cuDNN on the session's final kernels.
set -u
N=297; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack296.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 400 N/xtask train-bench --shapes "4,16,4096,128;4,16,4096,256" --iters 20 --varlen-seqs 0 --json $R/tb.json > $R/tb.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb.log
