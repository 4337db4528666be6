#!/bin/bash
# run 301 (H200): per-kernel durations (ncu, gpu__time_duration + SM cycles) of the wgmma backward's three
# kernels at equal B*S (S = 1024, 2048, 4096, 8192; D = 128 bf16), full and causal: the per-item cost.
set -u
N=301; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack299.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version" | head -2 >> $R/date.txt
mkdir -p /tmp/npy
python3 - <<'PY'
import numpy as np
rng=np.random.default_rng(0)
for b,s in ((16,1024),(8,2048),(4,4096),(2,8192)):
  for n in ('q','k','v','do'):
    np.save(f'/tmp/npy/{n}{s}.npy', rng.standard_normal((b,16,s,128)).astype(np.float16))
PY
M=gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_elapsed.avg,smsp__cycles_active.avg
for s in 1024 2048 4096 8192; do for c in none bottom-right; do
  timeout 100 ncu --clock-control base --metrics $M -k regex:"attn_bwd" --csv N/xtask backward --q /tmp/npy/q$s.npy --k /tmp/npy/k$s.npy --v /tmp/npy/v$s.npy --do /tmp/npy/do$s.npy --dq /tmp/npy/dq.npy --dk /tmp/npy/dk.npy --dv /tmp/npy/dv.npy --dtype bf16 --causal $c > $R/ncu_${s}_$c.csv 2> $R/ncu_${s}_$c.err
done; done
