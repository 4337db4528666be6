#!/bin/bash
# run 150: attn-candle's CUDA tests (now with a D = 256 gradient test); ncu on the D = 256 wgmma backward (4,16,4096,256 bf16, the default entry) to find its limiter.
set -u
N=150; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
(export LD_LIBRARY_PATH="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
 timeout 200 N/candle_gpu --ignored --test-threads 1 > $R/candle.log 2>&1; echo "rc=$?" >> $R/candle.log)
timeout 200 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis -k 'regex:attn_bwd_wg_bf16_d256_full$' --launch-skip 2 --launch-count 1 N/xtask train-bench --shapes "4,16,4096,256" --python none --warmup 1 --iters 3 --varlen-seqs 0 > $R/ncu.log 2>&1; echo "rc=$?" >> $R/ncu.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
