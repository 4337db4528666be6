#!/bin/bash
# run 274 (H200): N = 9c… + the Hopper forward skips O's rescale when no row of a warp has a new
# maximum (OnlineSoftmax::rescale_if_grown; exact), sm_90a, every head dim.
# ATTN_EXP_ALWAYS_RESCALE=1 (an experiment switch through FwdFeatures' padding, not landed) makes
# the same binary rescale every tile. bench (no SDPA, 100 samples) alternating the arms, two
# rounds; then the whole GPU suite on the skipping arm.
set -u
N=274; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
b() { # name, args...
  local n=$1; shift
  for arm in always skip; do
    if [ $arm = always ]; then export ATTN_EXP_ALWAYS_RESCALE=1; else unset ATTN_EXP_ALWAYS_RESCALE; fi
    timeout 60 N/xtask bench "$@" --samples 100 --no-sdpa --out-dir $R/o_${n}_${arm}_$i > $R/${n}_${arm}_$i.log 2>&1
  done
  unset ATTN_EXP_ALWAYS_RESCALE
}
for i in 1 2; do
  b d128 --shape 4,16,4096,128 --dtype both
  b d128c --shape 4,16,4096,128 --dtype both --causal bottom-right
  b d64 --shape 4,16,4096,64 --dtype bf16
  b d64c --shape 4,16,4096,64 --dtype bf16 --causal bottom-right
  b d256 --shape 4,16,4096,256 --dtype bf16
  b d128l --shape 1,16,16384,128 --dtype bf16
  b fp8 --shape 4,16,4096,128 --dtype f16 --fp8 hopper
  b fp8c --shape 4,16,4096,128 --dtype f16 --fp8 hopper --causal bottom-right
done
s=$(date +%s); timeout 300 N/gpu --ignored > $R/tests_all.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_all.log
