#!/bin/bash
# run 147: D = 256 backward adding dQ by 2 KiB bulk reductions per warp (N) against 16-byte reductions from registers (base = run 144's build, 82881ea): backward GPU tests on N; train-bench D = 256 alternating, twice; the decode test at run 142's failing seed on N (the emulation's KeyStates).
set -u
N=147; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 300 N/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log
for i in 1 2; do for b in base N; do
timeout 120 $b/xtask train-bench --shapes "4,16,4096,256;2,16,8192,256" --python none --iters 10 --varlen-seqs 0 > $R/train_${b}_$i.log 2>&1
done; done
ATTN_TEST_SEED=3766166809475418325 timeout 200 N/gpu --ignored --exact seqs::correctness_seqs_decode > $R/decode_seed.log 2>&1; echo "rc=$?" >> $R/decode_seed.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
