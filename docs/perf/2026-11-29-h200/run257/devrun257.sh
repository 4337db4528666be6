#!/bin/bash
# run 257 (H200): N4 = 6e76415 + the D = 160 / 192 features on the default 96-key ping-pong
# tile (the overlap tile without ping-pong dropped; sm_90a, every head dim). The whole GPU suite
# on N4; train-bench at D = 160 and 192 on F3 (6e76415) and N4, alternating, two rounds.
set -u
N=257; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
for i in 1 2; do
  for b in F3 N4; do
    s=$(date +%s); timeout 80 $b/xtask train-bench --shapes "4,16,4096,160;4,16,4096,192" --iters 20 --varlen-seqs 0 --python none > $R/train_${b}_$i.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/train_${b}_$i.log
  done
done
s=$(date +%s); timeout 280 N4/gpu --ignored > $R/suite_N4.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite_N4.log
