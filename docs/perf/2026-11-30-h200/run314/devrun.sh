#!/bin/bash
# run 314 (H200): B = 6457f6c (pack312), E1 = B + kWide at D = 256 (pack313E, D = 256 only),
# E2 = E1 + unrolled k-loops for that tile + FlashAttention-2's 128-query tile at D = 64
# (D = 64 and 256 only). mma.sync backward timings, E2's backward tests, and ncu section
# reports of ours against SDPA flash's backward kernel at D = 128 and 256.
set -u
N=314; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack312.txz -C $P; tar xJf target/pack313E.txz -C $P; tar xJf target/pack${N}E2.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
s=$(date +%s); timeout 100 E2/gpu --ignored backward > $R/tests.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests.log
for round in 1 2; do for b in N E E2; do
s=$(date +%s); timeout 60 $b/xtask train-bench --shapes "4,16,4096,256" --iters 20 --varlen-seqs 0 --python none > $R/tb256_${b}_$round.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb256_${b}_$round.log
done; for b in N E2; do
s=$(date +%s); timeout 60 $b/xtask train-bench --shapes "4,16,4096,64" --iters 20 --varlen-seqs 0 --python none > $R/tb64_${b}_$round.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb64_${b}_$round.log
done; done
s=$(date +%s); timeout 100 E2/xtask train-bench --shapes "4,16,4096,64;4,16,4096,256" --iters 20 --varlen-seqs 0 > $R/tb_E2_sdpa.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tb_E2_sdpa.log
mkdir -p /tmp/npy
python3 - <<'PY'
import numpy as np
rng=np.random.default_rng(0)
for d in (128,256):
  for n in ('q','k','v','do'):
    np.save(f'/tmp/npy/{n}{d}.npy', rng.standard_normal((4,16,4096,d)).astype(np.float16))
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
timeout 90 ncu $SEC -k regex:attn_bwd_bf16_d128_full --launch-count 1 N/xtask backward --q /tmp/npy/q128.npy --k /tmp/npy/k128.npy --v /tmp/npy/v128.npy --do /tmp/npy/do128.npy --dq /tmp/npy/dq.npy --dk /tmp/npy/dk.npy --dv /tmp/npy/dv.npy --dtype bf16 --engine mma-sync > $R/ncu_ours128.txt 2>&1
timeout 90 ncu $SEC -k regex:flash_bwd_dq_dk_dv --launch-count 1 python3 /tmp/flash_bwd.py 128 > $R/ncu_flash128.txt 2>&1
timeout 90 ncu $SEC -k regex:attn_bwd_bf16_d256_full --launch-count 1 E2/xtask backward --q /tmp/npy/q256.npy --k /tmp/npy/k256.npy --v /tmp/npy/v256.npy --do /tmp/npy/do256.npy --dq /tmp/npy/dq.npy --dk /tmp/npy/dk.npy --dv /tmp/npy/dv.npy --dtype bf16 --engine mma-sync > $R/ncu_ours256.txt 2>&1
timeout 90 ncu $SEC -k regex:flash_bwd_dq_dk_dv --launch-count 1 python3 /tmp/flash_bwd.py 256 > $R/ncu_flash256.txt 2>&1
