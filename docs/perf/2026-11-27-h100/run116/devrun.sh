#!/bin/bash
# run 116: ncu on the backward main kernels at 4,16,4096,D f16 (build of run 115): mma.sync d128 and d64 (128-key CTAs), wgmma d128 default.
set -u
N=116; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $R/date.txt
mkdir -p /tmp/npy
python3 - <<'PY'
import numpy as np
rng=np.random.default_rng(0)
for d in (64,128):
  for n in ('q','k','v','do'):
    np.save(f'/tmp/npy/{n}{d}.npy', rng.standard_normal((4,16,4096,d)).astype(np.float16))
PY
run() { # name kernel d engine sections...
  name=$1; k=$2; d=$3; e=$4; shift 4
  timeout 200 ncu "$@" -k regex:"^$k\$" --launch-count 1 -f -o $R/rep_$name gpu/xtask backward --q /tmp/npy/q$d.npy --k /tmp/npy/k$d.npy --v /tmp/npy/v$d.npy --do /tmp/npy/do$d.npy --dq /tmp/npy/dq.npy --dk /tmp/npy/dk.npy --dv /tmp/npy/dv.npy --engine $e > $R/ncu_$name.log 2>&1; echo "rc=$?" >> $R/ncu_$name.log
  timeout 100 ncu --import $R/rep_$name.ncu-rep --page details --csv > $R/details_$name.csv 2>> $R/ncu_$name.log
  if [ -n "${SASS:-}" ]; then timeout 100 ncu --import $R/rep_$name.ncu-rep --page source --csv --print-source sass > $R/sass_$name.csv 2>> $R/ncu_$name.log; fi
  rm -f $R/rep_$name.ncu-rep
}
SASS=1 run mma128 attn_bwd_f16_d128_full 128 mma-sync --section SourceCounters --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section Occupancy
run mma64 attn_bwd_f16_d64_full 64 mma-sync --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis
SASS=1 run wg128 attn_bwd_wg_f16_d128_full 128 auto --section SourceCounters --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis
gzip $R/sass_*.csv
tar czf $OUT/logs$N.tgz -C /tmp r$N
