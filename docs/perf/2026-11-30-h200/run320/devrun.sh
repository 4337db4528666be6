#!/bin/bash
# run 320 (H200): the final kernels (pack319): the backward's standing against SDPA (flash,
# cuDNN) at D = 128 and 256; ncu instruction counts per opcode of the mma.sync backward and
# SDPA flash's at D = 128 (where the fallback is 1.10x flash's time).
set -u
N=320; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack319.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
s=$(date +%s); timeout 150 N/xtask train-bench --shapes "4,16,4096,128;4,16,4096,256" --iters 20 --varlen-seqs 0 > $R/tb_sdpa.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb_sdpa.log
mkdir -p /tmp/npy
python3 - <<'PY'
import numpy as np
rng=np.random.default_rng(0)
for n in ('q','k','v','do'):
    np.save(f'/tmp/npy/{n}128.npy', rng.standard_normal((4,16,4096,128)).astype(np.float16))
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
M="--section InstructionStats --section SpeedOfLight --metrics sass__inst_executed_per_opcode --print-metric-instances details"
timeout 60 ncu $M -k regex:attn_bwd_bf16_d128_full --launch-count 1 N/xtask backward --q /tmp/npy/q128.npy --k /tmp/npy/k128.npy --v /tmp/npy/v128.npy --do /tmp/npy/do128.npy --dq /tmp/npy/dq.npy --dk /tmp/npy/dk.npy --dv /tmp/npy/dv.npy --dtype bf16 --engine mma-sync > $R/ncu_op_N128.txt 2>&1
timeout 60 ncu $M -k regex:flash_bwd_dq_dk_dv --launch-count 1 python3 /tmp/flash_bwd.py 128 > $R/ncu_op_flash128.txt 2>&1
