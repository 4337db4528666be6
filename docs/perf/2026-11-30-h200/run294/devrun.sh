#!/bin/bash
# run 294 (H200): the split-tail test with its key-order cases; then deterministic turns in key
# order everywhere (ATTN_EXPERIMENT_KEY_ORDER, an experiment knob of this build) against the
# rotated turns, train-bench --plain, alternating, two rounds.
set -u
N=294; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 120 N/gpu --ignored --exact backward::correctness_backward_split_tail > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
SH="4,16,4096,256;4,16,4096,128;4,16,4096,64;2,16,8192,128"
for round in 1 2; do
s=$(date +%s); timeout 100 N/xtask train-bench --plain --shapes "$SH" --iters 20 --varlen-seqs 0 --python none > $R/rot$round.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/rot$round.log
s=$(date +%s); ATTN_EXPERIMENT_KEY_ORDER=1 timeout 100 N/xtask train-bench --plain --shapes "$SH" --iters 20 --varlen-seqs 0 --python none > $R/key$round.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/key$round.log
done
