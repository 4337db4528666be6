#!/bin/bash
# run 125: (1) run 124's one failure, backward::correctness_backward_tails_gqa_and_head_dims at its seed, on the base build (7eceb53, dims 64/128) and on N, three times each; (2) attn-candle's CUDA tests on N's kernels; (3) ncu with source counters of the plain causal D = 128 entry and its feature entry with zero ALiBi slopes (same tile), to find the feature entry's extra instructions.
set -u
N=125; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $R/date.txt
for i in 1 2 3; do for b in base N; do
ATTN_TEST_SEED=7225464571772424255 timeout 100 $b/gpu --ignored backward::correctness_backward_tails_gqa_and_head_dims > $R/seed_${b}_$i.log 2>&1; echo "rc=$?" >> $R/seed_${b}_$i.log
done; done
(export LD_LIBRARY_PATH="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
 timeout 200 N/candle_gpu --ignored --test-threads 1 > $R/candle.log 2>&1; echo "rc=$?" >> $R/candle.log)
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
  timeout 200 ncu --section SourceCounters --section WarpStateStats --section InstructionStats -k regex:"$k" --launch-count 1 -f -o $R/rep_$name N/xtask forward --q /tmp/npy/q.npy --k /tmp/npy/k.npy --v /tmp/npy/v.npy --out /tmp/npy/o.npy --config hopper "$@" > $R/ncu_$name.log 2>&1; echo "rc=$?" >> $R/ncu_$name.log
  timeout 100 ncu --import $R/rep_$name.ncu-rep --page source --csv --print-source sass > $R/sass_$name.csv 2>> $R/ncu_$name.log
  rm -f $R/rep_$name.ncu-rep
}
run plain_causal '^attn_fwdh_f16_d128_wg128_128_s2_ia_causal$' --causal bottom-right
run noop_causal '^attn_fwdh_f16_d128_wg128_128_s2_ia_causal_feat$' --causal bottom-right --alibi /tmp/npy/zero.npy
gzip $R/sass_*.csv
tar czf $OUT/logs$N.tgz -C /tmp r$N
