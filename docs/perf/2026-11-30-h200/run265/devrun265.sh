#!/bin/bash
# run 265 (H200): F = the session's build with `_seq` entries on D = 256's default Hopper tile
# (catalog::hopper_seq_tile(256)): varlen and paged launches without features run them
# instead of the `_feat` entries. The seqs:: tests (sequence layouts on both engines, D = 256
# included), then serve-bench's varlen set at D = 256 (run 264: packed 0.944x the dense
# kernel's throughput on the same FLOPs, paged 1.16-1.18x the packed time).
set -u
N=265; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
s=$(date +%s); timeout 150 F/xtask serve-bench --only varlen --varlen-head-dim 256 --json $R/serve_varlen_d256.json > $R/serve_varlen_d256.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve_varlen_d256.log
s=$(date +%s); timeout 200 F/gpu --ignored seqs:: > $R/tests_seqs.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/tests_seqs.log
s=$(date +%s); timeout 150 F/xtask serve-bench --only varlen --varlen-head-dim 256 --seed 11 > $R/serve_varlen_d256_seed11.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/serve_varlen_d256_seed11.log
