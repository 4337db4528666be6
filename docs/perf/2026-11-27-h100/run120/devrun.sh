#!/bin/bash
# run 120: the window-skip timing test made robust to the suite's parallel tests (fastest of five alternating samples): alone three times, then the whole GPU suite.
set -u
N=120; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $R/date.txt
for i in 1 2 3; do timeout 60 gpu/gpu --ignored features::correctness_features_window_skips_tiles --nocapture >> $R/window.log 2>&1; echo "rc=$?" >> $R/window.log; done
timeout 280 gpu/gpu --ignored > $R/suite.log 2>&1; echo "rc=$?" >> $R/suite.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
