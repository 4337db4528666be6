#!/bin/bash
# run 154: HEAD 6722776 (all head dims, sm_80 + sm_90a): the whole GPU suite; ncu with source counters on the D = 128 wgmma backward (4,16,4096,128 bf16, default entry), to find what limits it after the reorder.
set -u
N=154; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 200 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section SourceCounters --import-source no -k 'regex:attn_bwd_wg_bf16_d128_full$' --launch-skip 2 --launch-count 1 --export $R/bwd128 N/xtask train-bench --shapes "4,16,4096,128" --python none --warmup 1 --iters 3 --varlen-seqs 0 > $R/ncu.log 2>&1; echo "rc=$?" >> $R/ncu.log
timeout 60 ncu --import $R/bwd128.ncu-rep --page source --csv --print-source sass > $R/source.csv 2> $R/source.err
timeout 300 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$?" >> $R/suite.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
