#!/bin/bash
# run 328 (H200): (1) E = FP8 causal launches at D = 128 ordered longest first across groups of
# 8 (head, batch) pairs (hopper::causal_lpt_heads without its D <= 64 bound; a D = 128-only
# build) against N = main (7553407: one pair at a time at D = 128), alternating, FP8 causal
# D = 128 shapes; (2) the standing: N's `bench --shapes large --fp8 auto` against SDPA and
# cuDNN's FP8 SDPA.
set -u
N=328; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/packN.txz -C $P; tar xJf target/packE.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
python3 -m pip install --no-deps --target /tmp/pyfp8 target/whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?" >> $R/pip.log
cd $P
date -u > $R/date.txt; nvidia-smi > $R/smi.txt 2>&1
for round in 1 2; do
for sh in 4,16,4096,128 2,8,2048,128 8,16,2048,128 2,16,8192,128; do
for b in N E; do
timeout 30 $b/xtask bench --shape $sh --causal bottom-right --fp8 hopper --no-sdpa --sustain-ms 300 --samples 150 --out-dir $R/b_${round}_${b}_$sh > $R/b_${round}_${b}_$sh.log 2>&1
done; done; done
s=$(date +%s); PYTHONPATH=/tmp/pyfp8 timeout 200 N/xtask bench --shapes large --dtype f16 --fp8 auto --samples 100 --sustain-ms 1500 --out-dir $R/large > $R/large.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/large.log
