#!/bin/bash
# run 124: the final build of the session (all head dims, sm_80 + sm_90a): the whole GPU suite; the varlen backward (failed once in run 122) and the saturating softcap test three more times; ncu of the plain causal D = 128 entry against its feature entry with zero ALiBi slopes (same tile), and of the softcap entry.
set -u
N=124; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
timeout 420 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$?" >> $R/suite.log
for i in 1 2 3; do timeout 60 N/gpu --ignored backward_general::correctness_backward_varlen features::correctness_features_softcap_saturating >> $R/repeat.log 2>&1; echo "rc=$?" >> $R/repeat.log; done
mkdir -p /tmp/npy
python3 - <<'PY'
import numpy as np
rng=np.random.default_rng(0)
for n in ('q','k','v'):
    np.save(f'/tmp/npy/{n}.npy', rng.standard_normal((4,16,4096,128)).astype(np.float16))
np.save('/tmp/npy/zero.npy', np.zeros(16, dtype=np.float32))
PY
run() { # name kernel-regex extra-flags...
  name=$1; k=$2; shift 2
  timeout 200 ncu --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats --section LaunchStats --section Occupancy -k regex:"$k" --launch-count 1 -f -o $R/rep_$name N/xtask forward --q /tmp/npy/q.npy --k /tmp/npy/k.npy --v /tmp/npy/v.npy --out /tmp/npy/o.npy --config hopper "$@" > $R/ncu_$name.log 2>&1; echo "rc=$?" >> $R/ncu_$name.log
  timeout 100 ncu --import $R/rep_$name.ncu-rep --page details --csv > $R/details_$name.csv 2>> $R/ncu_$name.log
  rm -f $R/rep_$name.ncu-rep
}
run plain_causal '^attn_fwdh_f16_d128_wg128_128_s2_ia_causal$' --causal bottom-right
run noop_causal '^attn_fwdh_f16_d128_wg128_128_s2_ia_causal_feat$' --causal bottom-right --alibi /tmp/npy/zero.npy
run softcap_causal '^attn_fwdh_f16_d128_wg128_128_s2_ia_causal_feat$' --causal bottom-right --softcap 30
tar czf $OUT/logs$N.tgz -C /tmp r$N
