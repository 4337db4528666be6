#!/bin/bash
# run 300 (H200): where the causal wgmma backward's extra time goes (issue 17: causal 1.09x cuDNN).
# (1) train-bench --plain at equal FLOPs over S (per-item overhead), full and causal;
# (2) ncu on the full and causal bwd main kernels at 4,16,4096,128 bf16 (SM-active spread, gmma active, stalls).
set -u
N=300; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack299.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 200 N/xtask train-bench --plain --shapes "4,16,4096,128;8,16,2048,128;16,16,1024,128;2,16,8192,128" --iters 20 --varlen-seqs 0 --python none > $R/tb.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb.log
mkdir -p /tmp/npy
python3 - <<'PY'
import numpy as np
rng=np.random.default_rng(0)
for n in ('q','k','v','do'):
    np.save(f'/tmp/npy/{n}.npy', rng.standard_normal((4,16,4096,128)).astype(np.float16))
PY
M=gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.min,sm__cycles_active.max,sm__cycles_elapsed.avg,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sectors_op_red.sum,lts__t_sectors_op_atom.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed
for c in none bottom-right; do
  k=attn_bwd_wg_bf16_d128_full; [ $c = none ] || k=attn_bwd_wg_bf16_d128_causal
  s=$(date +%s)
  timeout 150 ncu --clock-control none --metrics $M --section WarpStateStats --section SpeedOfLight -k regex:"^$k\$" --launch-count 1 -f -o $R/rep_$c N/xtask backward --q /tmp/npy/q.npy --k /tmp/npy/k.npy --v /tmp/npy/v.npy --do /tmp/npy/do.npy --dq /tmp/npy/dq.npy --dk /tmp/npy/dk.npy --dv /tmp/npy/dv.npy --dtype bf16 --causal $c > $R/ncu_$c.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/ncu_$c.log
  timeout 60 ncu --import $R/rep_$c.ncu-rep --page details --csv > $R/details_$c.csv 2>> $R/ncu_$c.log
  rm -f $R/rep_$c.ncu-rep
done
