#!/bin/bash
# run 240, part 1 (H200): T = the profiling build (ATTN_TIMELINE=1, D = 128, sm_90a) of 3a42051:
# the timeline test, and `bench --timeline` on the f16 and FP8 defaults at 4,16,4096,128 and the
# walking 176-key tile at 1,16,16384,128.
set -u
N=240; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack${N}t.txz -C $P
trap 'tar czf $OUT/logs${N}t.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date_t.txt
timeout 60 T/gpu --ignored --nocapture timeline > $R/tests_T.log 2>&1; echo "rc=$?" >> $R/tests_T.log
timeout 60 T/xtask bench --shape 4,16,4096,128 --dtype f16 --fp8 hopper --no-sdpa --samples 20 --timeline --out-dir $R/tl > $R/timeline_4096.log 2>&1
timeout 60 T/xtask bench --shape 1,16,16384,128 --dtype bf16 --no-sdpa --samples 10 --timeline --out-dir $R/tl16k > $R/timeline_16k.log 2>&1
gzip -9 $R/tl/timeline.csv $R/tl16k/timeline.csv
rm -rf $R/tl/samples $R/tl16k/samples
