#!/bin/bash
# run 299 (H200): train-bench after `time` became time_interleaved's one-call case: --plain and
# the full set (no SDPA) at 4,16,4096,128; the figures should match runs 296-297's.
set -u
N=299; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
s=$(date +%s); timeout 120 N/xtask train-bench --plain --shapes "4,16,4096,128" --iters 20 --varlen-seqs 0 --python none > $R/plain.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/plain.log
s=$(date +%s); timeout 120 N/xtask train-bench --shapes "4,16,4096,128" --iters 20 --varlen-seqs 0 --python none > $R/full.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/full.log
