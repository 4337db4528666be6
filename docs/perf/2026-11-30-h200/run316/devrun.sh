#!/bin/bash
# run 316 (H200): HEAD's kernels (37f7838 + launch fix): racecheck/synccheck/initcheck on the small
# backward test, debug:: on the debug-kernels build; the gate's bench (seed-large, both dtypes,
# FP8 with cuDNN FP8) for the first time on a GPU (short sustain: a path check, not standings);
# E = HEAD + FlashAttention-2's 128-query backward tile at D = 64 (D = 64 only): its backward
# tests and its mma.sync timing vs HEAD's and SDPA flash; ncu of ours vs flash at D = 64.
set -u
N=316; R=$OUT/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; tar xJf target/pack${N}D.txz -C $P; tar xJf target/pack${N}E.txz -C $P
python3 -m pip install --no-deps --target /tmp/pyfp8 target/whl/*.whl > $R/pip.log 2>&1; echo "pip rc=$?" >> $R/pip.log
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version" | head -2 >> $R/date.txt
s=$(date +%s); timeout 60 E/gpu --ignored backward > $R/E_tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/E_tests.log
for round in 1 2; do for b in N E; do
s=$(date +%s); timeout 50 $b/xtask train-bench --shapes "4,16,4096,64" --iters 20 --sustain-ms 500 --varlen-seqs 0 --python none > $R/tb64_${b}_$round.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb64_${b}_$round.log
done; done
s=$(date +%s); timeout 60 E/xtask train-bench --shapes "4,16,4096,64" --iters 20 --varlen-seqs 0 > $R/tb64_E_sdpa.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb64_E_sdpa.log
s=$(date +%s); PYTHONPATH=/tmp/pyfp8 timeout 150 N/xtask bench --shapes seed-large --dtype both --fp8 auto --samples 50 --sustain-ms 300 --out-dir $R/bench > $R/bench.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/bench.log
s=$(date +%s); timeout 30 D/gpu --ignored debug:: > $R/debug.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/debug.log
for tool in racecheck synccheck initcheck; do
s=$(date +%s); timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 N/gpu --ignored --exact backward::sanitize_backward_small > $R/$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$tool.log
done
mkdir -p /tmp/npy
python3 - <<'PY'
import numpy as np
rng=np.random.default_rng(0)
for n in ('q','k','v','do'):
    np.save(f'/tmp/npy/{n}64.npy', rng.standard_normal((4,16,4096,64)).astype(np.float16))
PY
cat > /tmp/flash_bwd.py <<'PY'
import sys, torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
d=int(sys.argv[1])
q,k,v,do=[torch.randn(4,16,4096,d,device='cuda',dtype=torch.bfloat16) for _ in range(4)]
for t in (q,k,v): t.requires_grad_(True)
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    for _ in range(2):
        o=F.scaled_dot_product_attention(q,k,v); o.backward(do)
torch.cuda.synchronize()
PY
SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section InstructionStats --section SchedulerStats --section Occupancy --section LaunchStats"
for b in N; do
timeout 60 ncu $SEC -k regex:attn_bwd_bf16_d64_full --launch-count 1 $b/xtask backward --q /tmp/npy/q64.npy --k /tmp/npy/k64.npy --v /tmp/npy/v64.npy --do /tmp/npy/do64.npy --dq /tmp/npy/dq.npy --dk /tmp/npy/dk.npy --dv /tmp/npy/dv.npy --dtype bf16 --engine mma-sync > $R/ncu_${b}64.txt 2>&1
done
timeout 60 ncu $SEC -k regex:flash_bwd_dq_dk_dv --launch-count 1 python3 /tmp/flash_bwd.py 64 > $R/ncu_flash64.txt 2>&1
