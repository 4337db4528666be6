#!/bin/bash
# run 261 (H200): the paged sequence test with D = 256 added (its feature and sequence launches
# now run the 80-key tile, whose TMA boxes are 16 rows for every page size), on the landing
# build (135d760 kernels, every head dim).
set -u
N=261; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
s=$(date +%s); timeout 200 F/gpu --ignored seqs::correctness_seqs_paged > $R/tests_paged.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_paged.log
