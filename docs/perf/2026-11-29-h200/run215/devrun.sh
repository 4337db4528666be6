#!/bin/bash
# run 215 (H200): F = b6d468f + the split-KV merge shared: split_combine.cuh's last_split and
# merge_splits run the mma.sync, decode and Hopper split epilogues (the Hopper kernel's own
# copy removed). GPU tests splits::, seqs::, features::, hopper::; memcheck and racecheck on
# the Hopper split test.
set -u
N=215; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for tool in memcheck racecheck; do
  s=$(date +%s); timeout 30 compute-sanitizer --tool $tool --error-exitcode 9 F/gpu --ignored --exact seqs::sanitize_seqs_hopper_split_deterministic > $R/san_$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/san_$tool.log
done
s=$(date +%s); timeout 150 F/gpu --ignored splits:: seqs:: features:: hopper:: > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
