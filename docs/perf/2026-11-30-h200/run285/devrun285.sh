#!/bin/bash
# run 285 (H200): the 99 KiB backward tile and the small-smem forward/decode test (a launcher
# limited to sm_86/89's 99 KiB) under memcheck and racecheck, the whole GPU suite, and
# train-bench --plain with the deterministic backward's tail split (what Auto leaves out).
set -u
N=285; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 120 N/gpu --ignored --exact backward::correctness_backward_99_kib_tile small_smem::correctness_small_smem_forward_and_decode > $R/small.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/small.log
s=$(date +%s); timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 N/gpu --ignored --exact backward::correctness_backward_99_kib_tile > $R/memcheck.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/memcheck.log
s=$(date +%s); timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 N/gpu --ignored --exact backward::correctness_backward_99_kib_tile > $R/racecheck.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/racecheck.log
for i in 1 2; do
timeout 100 N/xtask train-bench --plain --shapes "4,16,4096,256;4,16,4096,128" --iters 20 --varlen-seqs 0 --python none > $R/tb_$i.log 2>&1; echo "rc=$?" >> $R/tb_$i.log
done
# the whole suite: run 286
