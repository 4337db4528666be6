#!/bin/bash
# run 119: the landing build (fba40ee: deterministic writers + rotation, mma.sync 128-key CTAs with 2-D atoms): the whole GPU suite, attn-candle's CUDA tests.
set -u
N=119; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $R/date.txt
timeout 330 gpu/gpu --ignored > $R/suite.log 2>&1; echo "rc=$?" >> $R/suite.log
export LD_LIBRARY_PATH="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout 150 gpu/candle --ignored --test-threads 1 > $R/candle.log 2>&1; echo "rc=$?" >> $R/candle.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
