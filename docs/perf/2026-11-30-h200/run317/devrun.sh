#!/bin/bash
# run 317 (H200): run 316's timings again (its logs were too many files to come back): E = HEAD
# + FlashAttention-2's 128-query backward tile at D = 64 against HEAD (N), alternated, and E against
# SDPA; ncu instruction counts per opcode of N, E and SDPA flash's backward at D = 64; racecheck
# and synccheck on HEAD's small backward test. Everything is tarred into one file.
set -u
N=317; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack316.txz -C $P; tar xJf target/pack316E.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
for round in 1 2; do for b in N E; do
s=$(date +%s); timeout 50 $b/xtask train-bench --shapes "4,16,4096,64" --iters 20 --sustain-ms 500 --varlen-seqs 0 --python none > $R/tb64_${b}_$round.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb64_${b}_$round.log
done; done
s=$(date +%s); timeout 70 E/xtask train-bench --shapes "4,16,4096,64" --iters 20 --varlen-seqs 0 > $R/tb64_E_sdpa.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb64_E_sdpa.log
for tool in racecheck synccheck; do
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
M="--section InstructionStats --section SpeedOfLight --metrics sass__inst_executed_per_opcode --print-metric-instances values"
for b in N E; do
timeout 45 ncu $M -k regex:attn_bwd_bf16_d64_full --launch-count 1 $b/xtask backward --q /tmp/npy/q64.npy --k /tmp/npy/k64.npy --v /tmp/npy/v64.npy --do /tmp/npy/do64.npy --dq /tmp/npy/dq.npy --dk /tmp/npy/dk.npy --dv /tmp/npy/dv.npy --dtype bf16 --engine mma-sync > $R/ncu_op_${b}64.txt 2>&1
done
timeout 45 ncu $M -k regex:flash_bwd_dq_dk_dv --launch-count 1 python3 /tmp/flash_bwd.py 64 > $R/ncu_op_flash64.txt 2>&1
