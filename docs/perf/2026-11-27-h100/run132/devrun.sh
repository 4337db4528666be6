#!/bin/bash
# run 132: softcap at D = 128 on the 128-key ping-pong tile (the feature tile made pp+ia for the experiment): PM (all exponentials on MUFU, 68ed425's kernels) and PP (half on exp2_fma, e10e9b1's), against base and N of run 130; features:: on PP and PM (D=128 softcap cases run the pp tile); ncu of PM/PP softcap.
set -u
N=132; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $R/date.txt
for b in PM PP; do timeout 100 $b/gpu --ignored features::correctness_features_d128 features::correctness_features_softcap_saturating > $R/tests_$b.log 2>&1; echo "rc=$?" >> $R/tests_$b.log; done
for i in 1 2; do
for b in base N PM PP; do
timeout 120 $b/xtask train-bench --shapes "4,16,4096,128" --python none --iters 10 --varlen-seqs 0 --json $R/train_${b}_$i.json > $R/train_${b}_$i.log 2>&1; echo "rc=$?" >> $R/train_${b}_$i.log
done; done
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
  rm -f $R/rep_$name.ncu-rep
}
K='^attn_fwdh_f16_d128_wg128_128_s2_pp_ia_full_feat$'
run softcap_PM PM "$K" --config hopper --softcap 30
run softcap_PP PP "$K" --config hopper --softcap 30
gzip $R/raw_*.csv
tar czf $OUT/logs$N.tgz -C /tmp r$N
