#!/bin/bash
# run 248 (H200): ncu with source counters on the mma.sync backward at 4,16,4096,64 f16
# non-causal (attn_bwd_f16_d64_full, 0bff797's build), deterministic and default launches
# (`xtask backward --engine mma-sync`): where the deterministic mode's 1.2x goes.
set -u
N=248; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack247.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
python3 -c "
import numpy as np
rng = np.random.default_rng(248)
for n in ['q', 'k', 'v', 'do']:
    np.save('/tmp/' + n + '.npy', rng.standard_normal((4, 16, 4096, 64)).astype(np.float16))
" > $R/npy.log 2>&1
for mode in det default; do
  flag=""; [ $mode = det ] && flag="--deterministic"
  s=$(date +%s); timeout 250 ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters --import-source no -k 'regex:attn_bwd_f16_d64_full$' --launch-count 1 --export $R/$mode B0/xtask backward --q /tmp/q.npy --k /tmp/k.npy --v /tmp/v.npy --do /tmp/do.npy --dq /tmp/dq.npy --dk /tmp/dk.npy --dv /tmp/dv.npy --engine mma-sync $flag > $R/ncu_$mode.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ncu_$mode.log
  timeout 60 ncu --import $R/$mode.ncu-rep --page details > $R/details_$mode.txt 2>&1
  timeout 60 ncu --import $R/$mode.ncu-rep --page source --csv --print-source sass > $R/source_$mode.csv 2> $R/source_$mode.err; gzip $R/source_$mode.csv
  rm -f $R/$mode.ncu-rep
done
