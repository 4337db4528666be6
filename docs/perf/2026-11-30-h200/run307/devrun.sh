#!/bin/bash
# run 307 (H200): train-bench --plain with a persistent launch without a split tail beside the default
# (persistent + split tail): does the split still pay on persistent CTAs? (run 306's trace: the pieces'
# merges cost 30-80 us per CTA at the end).
set -u
N=307; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
for round in 1 2; do
s=$(date +%s); timeout 120 N/xtask train-bench --plain --shapes "4,16,4096,128;2,16,8192,128;8,16,2048,128;4,16,4096,64;4,16,4096,256" --iters 20 --varlen-seqs 0 --python none > $R/tb$round.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb$round.log
done
