#!/bin/bash
# run 268 (H200): the debug build (debug-kernels, sm_90a, D 64/128) of a1161fe (the backward
# tile dumps after their refactor): the debug tests and `xtask oracle --backward`.
set -u
N=268; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 200 D/gpu --ignored debug:: > $R/tests_debug.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_debug.log
s=$(date +%s); timeout 60 D/xtask oracle --shape 2,4,300,128 --kv-heads 2 --causal bottom-right --tiles 0:1:1,1:3:4 --backward --out-dir $R/oracle_bwd_f16 > $R/oracle_bwd_f16.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/oracle_bwd_f16.log
s=$(date +%s); timeout 60 D/xtask oracle --shape 1,2,100,64 --tiles 0:0:5 --backward --out-dir $R/oracle_bwd_bad > $R/oracle_bwd_bad.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/oracle_bwd_bad.log
rm -rf $R/oracle_bwd_*/bwd_tiles
