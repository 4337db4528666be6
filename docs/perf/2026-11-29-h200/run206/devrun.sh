#!/bin/bash
# run 206 (H200): A = af2e1ea (run 205's C); D = A + the decode kernel's page-table entries
# clamped where the copy is issued, a stage after the read (page_of clamped at once, so each
# stage's math waited for the table read). serve-bench A/D alternating; ncu on D's dense and
# page-16 paged decode launches (serve-bench's paged set); D's whole GPU suite.
set -u
N=206; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
for b in A D A D; do
  s=$(date +%s); timeout 55 $b/xtask serve-bench --json $R/serve_$b.json >> $R/serve_$b.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve_$b.log
done
s=$(date +%s); timeout 120 ncu --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy -k 'regex:attn_dec_f16_d128_r4$' --launch-count 16 --csv --page details D/xtask serve-bench --warmup 1 --samples 2 > $R/ncu.csv 2> $R/ncu.err; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ncu.err
s=$(date +%s); timeout 230 D/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
