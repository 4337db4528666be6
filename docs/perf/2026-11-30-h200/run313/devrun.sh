#!/bin/bash
# run 313 (H200): B = 6457f6c's build (pack312), E = B plus FlashAttention-2's 2-D warp atoms in
# the mma.sync backward's 64-key tile above D = 128 (kWide; D = 256 only in E's build).
set -u
N=313; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack312.txz -C $P; tar xJf target/pack${N}E.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
s=$(date +%s); timeout 150 E/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
for round in 1 2; do for b in N E; do
s=$(date +%s); timeout 60 $b/xtask train-bench --shapes "4,16,4096,256" --iters 20 --varlen-seqs 0 --python none > $R/tb_${b}_$round.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb_${b}_$round.log
done; done
s=$(date +%s); timeout 90 E/xtask train-bench --shapes "4,16,4096,256" --iters 20 --varlen-seqs 0 > $R/tb_E_sdpa.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb_E_sdpa.log
s=$(date +%s); timeout 90 N/xtask train-bench --shapes "4,16,4096,64" --iters 20 --varlen-seqs 0 > $R/tb_N_sdpa64.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb_N_sdpa64.log
