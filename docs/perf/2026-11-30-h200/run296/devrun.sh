#!/bin/bash
# run 296 (H200): train-bench --plain with the backward launches timed interleaved (the
# landing kernels): the deterministic Auto / grid / forced pieces, two rounds.
set -u
N=296; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
SH="4,16,4096,256;2,16,8192,256;4,16,4096,128;2,16,8192,128;4,16,4096,64"
for round in 1 2; do
s=$(date +%s); timeout 200 N/xtask train-bench --plain --shapes "$SH" --iters 20 --varlen-seqs 0 --python none --json $R/tb$round.json > $R/tb$round.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb$round.log
done
