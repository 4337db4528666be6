#!/bin/bash
# run 253 (H200): the tile oracle from the CLI on the Hopper engine: `xtask oracle --config
# hopper --tiles …` with run 250's debug-kernels build (D 64/128, sm_90a), against the same
# command on the mma.sync debug config.
set -u
N=253; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack250.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
for cfg in hopper mma; do
  for c in none bottom-right; do
    timeout 60 DBG/xtask oracle --shape 2,4,700,128 --kv-heads 2 --causal $c --config $cfg --tiles 0:1:2,1:3:0 --seed 253 --out-dir $R/oracle_${cfg}_$c > $R/oracle_${cfg}_$c.log 2>&1; echo "rc=$?" >> $R/oracle_${cfg}_$c.log
  done
done
timeout 60 DBG/xtask oracle --shape 1,8,512,64 --config hopper --tiles 0:5:3 --seed 254 --out-dir $R/oracle_hopper_d64 > $R/oracle_hopper_d64.log 2>&1; echo "rc=$?" >> $R/oracle_hopper_d64.log
