#!/bin/bash
# run 240, part 2 (H200). T = the profiling build (ATTN_TIMELINE=1, D = 128, sm_90a) of 75fc895
# (one buffer region per entry kind): the timeline test and `bench --timeline` on the f16 and
# FP8 defaults. F = the release build (sm_80 + sm_90a, every head dim; its kernels' release code
# is 75fc895's): the whole GPU suite, and the standing at 4,16,4096,128 against SDPA.
set -u
N=240; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
timeout 60 T/gpu --ignored --nocapture timeline > $R/tests_T2.log 2>&1; echo "rc=$?" >> $R/tests_T2.log
timeout 60 T/xtask bench --shape 4,16,4096,128 --dtype f16 --fp8 hopper --no-sdpa --samples 20 --timeline --out-dir $R/tl2 > $R/timeline2_4096.log 2>&1
gzip -9 $R/tl2/timeline.csv; rm -rf $R/tl2/samples
s=$(date +%s); timeout 300 F/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
timeout 120 F/xtask bench --shape 4,16,4096,128 --dtype both --samples 200 --out-dir $R/b > $R/standing.log 2>&1
rm -rf $R/b/samples
