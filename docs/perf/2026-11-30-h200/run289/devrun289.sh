#!/bin/bash
# run 289 (H200): the final build (d5cf256's kernels and launcher; later commits change tests
# and docs): the small-smem tests with sm_86's FP8 default (cvt) added, then the whole suite.
set -u
N=289; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 60 N/gpu --ignored small_smem 99_kib > $R/small.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/small.log
s=$(date +%s); timeout 300 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
