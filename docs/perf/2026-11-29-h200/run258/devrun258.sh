#!/bin/bash
# run 258 (H200): run 257's build N4 with the every-tile test's fixed floor (it checked the run
# count before the failures, and the floor assumed two tiles per bucket): the hopper:: tests.
set -u
N=258; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
s=$(date +%s); timeout 200 N4/gpu --ignored hopper:: > $R/tests_hopper_N4.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_hopper_N4.log
