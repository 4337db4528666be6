#!/bin/bash
# run 264 (H200): the session's build (5246bc5 + the backward's tile dumps, sm_90a).
# D = the debug build (debug-kernels, D 64/128): the debug tests (the new backward tile dumps
# against attn-ref's backward tiles, and the forward's) and `xtask oracle --backward`.
# F = the release build (every head dim): serve-bench's varlen set at D = 256 and 128 (issue 16:
# paged prefill at D = 256 was untimed), then the whole GPU suite.
set -u
N=264; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 200 D/gpu --ignored debug:: > $R/tests_debug.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_debug.log
s=$(date +%s); timeout 60 D/xtask oracle --shape 2,4,300,128 --kv-heads 2 --causal bottom-right --tiles 0:1:1,1:3:4 --backward --out-dir $R/oracle_bwd_f16 > $R/oracle_bwd_f16.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/oracle_bwd_f16.log
s=$(date +%s); timeout 60 D/xtask oracle --shape 1,8,512,64 --kv-len 700 --dtype bf16 --tiles 0:7:3 --backward --out-dir $R/oracle_bwd_bf16 > $R/oracle_bwd_bf16.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/oracle_bwd_bf16.log
rm -rf $R/oracle_bwd_*/bwd_tiles
for d in 256 128; do
  s=$(date +%s); timeout 150 F/xtask serve-bench --only varlen --varlen-head-dim $d --json $R/serve_varlen_d$d.json > $R/serve_varlen_d$d.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve_varlen_d$d.log
done
s=$(date +%s); timeout 280 F/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
