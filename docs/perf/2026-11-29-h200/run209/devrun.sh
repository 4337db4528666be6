#!/bin/bash
# run 209 (H200): F = 0092711 + split-KV in the Hopper sequence and feature entries (grid.y
# splits an item's key tiles; the last CTA merges in split order). serve-bench (its new
# chunked-prefill set times the default, unsplit and mma.sync); GPU tests seqs::, features::,
# hopper::; compute-sanitizer memcheck, racecheck and synccheck on the split launch test.
set -u
N=209; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 90 F/xtask serve-bench --json $R/serve_F.json >> $R/serve_F.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve_F.log
for tool in memcheck racecheck synccheck; do
  s=$(date +%s); timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 F/gpu --ignored --exact seqs::sanitize_seqs_hopper_split_deterministic > $R/san_$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/san_$tool.log
done
s=$(date +%s); timeout 330 F/gpu --ignored seqs:: features:: hopper:: > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
