#!/bin/bash
# run 131: ncu of the softcap entry (4,16,4096,128 f16, non-causal, the 128-key feature tile) on base (68ed425, all exponentials on MUFU) and N (half on exp2_fma), and of the plain entry on the same tile: pipe utilization, issue, stall reasons, to find the softcap entry's limiter (run 130: moving exponentials to the FMA pipe made it slower).
set -u
N=131; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack130.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $R/date.txt
mkdir -p /tmp/npy
python3 - <<'PY'
import numpy as np
rng=np.random.default_rng(0)
for n in ('q','k','v'):
    np.save(f'/tmp/npy/{n}.npy', rng.standard_normal((4,16,4096,128)).astype(np.float16))
PY
run() { # name build kernel-regex extra-flags...
  name=$1; b=$2; k=$3; shift 3
  timeout 150 ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --section SchedulerStats -k regex:"$k" --launch-count 1 -f -o $R/rep_$name $b/xtask forward --q /tmp/npy/q.npy --k /tmp/npy/k.npy --v /tmp/npy/v.npy --out /tmp/npy/o.npy "$@" > $R/ncu_$name.log 2>&1; echo "rc=$?" >> $R/ncu_$name.log
  timeout 100 ncu --import $R/rep_$name.ncu-rep --page raw --csv > $R/raw_$name.csv 2>> $R/ncu_$name.log
  timeout 100 ncu --import $R/rep_$name.ncu-rep --page details > $R/details_$name.txt 2>> $R/ncu_$name.log
}
K='^attn_fwdh_f16_d128_wg128_128_s2_ia_full_feat$'
run softcap_base base "$K" --config hopper --softcap 30
run softcap_N N "$K" --config hopper --softcap 30
run noop_base base "$K" --config hopper --window=-1,100000
run plain_base base '^attn_fwdh_f16_d128_wg128_128_s2_ia_full$' --config wg128_128_s2_ia
gzip $R/raw_*.csv
tar czf $OUT/logs$N.tgz -C /tmp r$N
