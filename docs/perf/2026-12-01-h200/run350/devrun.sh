#!/bin/bash
# run 350 (H200): N = the final code after the review mend (one split-count check,
# hopper::checked_splits; the FP8 tests' skip helper). The FP8, split, Hopper and validation
# GPU tests.
set -u
N=350; R=/tmp/r$N
mkdir -p $R /tmp/pN; tar xJf target/pack350.txz -C /tmp/pN
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
t tests 250 /tmp/pN/350/gpu --ignored fp8:: splits:: hopper:: validation::
exit 0
