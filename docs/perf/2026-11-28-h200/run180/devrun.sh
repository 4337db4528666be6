#!/bin/bash
# run 180 (H200): ncu with source counters on the mma.sync backward at 4,16,4096,128 bf16, build N2 of run 179 (phase C before B, one barrier fewer).
set -u
N=180; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack179.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
s=$(date +%s); timeout 200 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats --section SourceCounters --import-source no -k 'regex:attn_bwd_b?f16_d128_full$' --launch-skip 1 --launch-count 1 --export $R/mma128 N2/xtask train-bench --shapes "4,16,4096,128" --python none --warmup 1 --iters 2 --varlen-seqs 0 > $R/ncu.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ncu.log
timeout 60 ncu --import $R/mma128.ncu-rep --page details > $R/details.txt 2>&1
timeout 60 ncu --import $R/mma128.ncu-rep --page source --csv --print-source sass > $R/source.csv 2> $R/source.err; gzip $R/source.csv
rm -f $R/*.ncu-rep
tar czf $OUT/logs$N.tgz -C /tmp r$N
