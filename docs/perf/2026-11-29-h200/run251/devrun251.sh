#!/bin/bash
# run 251 (H200): the landing build (db5e547, sm_90a, every head dim): the whole GPU suite on
# the trimmed Hopper catalog; then ncu with source counters on the wgmma backward at
# 4,16,4096,128 f16 non-causal (attn_bwd_wg_f16_d128_full, `xtask backward --engine hopper`),
# the one wgmma shape still over cuDNN's backward time (issue 17), to name its limiter.
set -u
N=251; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 420 L/gpu --ignored > $R/tests_full.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_full.log
python3 -c "
import numpy as np
rng = np.random.default_rng(251)
for n in ['q', 'k', 'v', 'do']:
    np.save('/tmp/' + n + '.npy', rng.standard_normal((4, 16, 4096, 128)).astype(np.float16))
" > $R/npy.log 2>&1
s=$(date +%s); timeout 120 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters --import-source no -k 'regex:attn_bwd_wg_f16_d128_full$' --launch-count 1 --export $R/wg128 L/xtask backward --q /tmp/q.npy --k /tmp/k.npy --v /tmp/v.npy --do /tmp/do.npy --dq /tmp/dq.npy --dk /tmp/dk.npy --dv /tmp/dv.npy --engine hopper > $R/ncu.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ncu.log
timeout 60 ncu --import $R/wg128.ncu-rep --page details > $R/details.txt 2>&1
timeout 60 ncu --import $R/wg128.ncu-rep --page source --csv --print-source sass > $R/source.csv 2> $R/source.err; gzip $R/source.csv
rm -f $R/*.ncu-rep
