#!/bin/bash
# run 176 (H200): ncu with source counters on the mma.sync backward (the sm_80/89 fallback) at 4,16,4096,128 bf16, HEAD 57355b2's build: what limits it against SDPA flash (1.30-1.80x flash's time).
set -u
N=176; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack176.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 200 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats --section SourceCounters --import-source no -k 'regex:attn_bwd_b?f16_d128_full$' --launch-skip 1 --launch-count 1 --export $R/mma128 base/xtask train-bench --shapes "4,16,4096,128" --python none --warmup 1 --iters 2 --varlen-seqs 0 > $R/ncu.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ncu.log
timeout 60 ncu --import $R/mma128.ncu-rep --page details > $R/details.txt 2>&1
timeout 60 ncu --import $R/mma128.ncu-rep --page source --csv --print-source sass > $R/source.csv 2> $R/source.err; gzip $R/source.csv
rm -f $R/*.ncu-rep
tar czf $OUT/logs$N.tgz -C /tmp r$N
