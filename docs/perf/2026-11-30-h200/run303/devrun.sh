#!/bin/bash
# run 303 (H200): (1) the persistent backward with D = 256's K barrier: backward:: tests;
# (2) a trace build (printf of %globaltimer per item, CTAs 0-2 and 100) of the persistent
# wgmma backward at 4,16,4096,128 bf16, full and causal: where an item's time goes.
set -u
N=303; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; tar xJf target/pack${N}T.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 200 N/gpu --ignored backward:: > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
mkdir -p /tmp/npy
python3 - <<'PY'
import numpy as np
rng=np.random.default_rng(0)
for n in ('q','k','v','do'):
    np.save(f'/tmp/npy/{n}.npy', rng.standard_normal((4,16,4096,128)).astype(np.float16))
PY
for c in none bottom-right; do
  timeout 60 T/xtask backward --q /tmp/npy/q.npy --k /tmp/npy/k.npy --v /tmp/npy/v.npy --do /tmp/npy/do.npy --dq /tmp/npy/dq.npy --dk /tmp/npy/dk.npy --dv /tmp/npy/dv.npy --dtype bf16 --causal $c > $R/trace_$c.log 2>&1; echo "rc=$?" >> $R/trace_$c.log
done
for tool in memcheck racecheck; do
s=$(date +%s); timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact backward::correctness_backward_persistent > $R/$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$tool.log
done
