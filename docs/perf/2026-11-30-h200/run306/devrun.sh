#!/bin/bash
# run 306 (H200): a trace build of the persistent wgmma backward (per CTA, the sums over its items of
# the K/V wait, the block loop, the epilogue and the gap to the next item, %globaltimer, printed
# once at exit: trace2.patch) at 4,16,4096,128 bf16, full and causal.
set -u
N=306; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack${N}T.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
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
