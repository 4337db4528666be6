#!/bin/bash
# run 335 (H200): run 334 again (N = b75414f), its dump and suite log as tarballs (run 334's
# came back too deep / too many): the 99 KiB tile's miss at its seed, dumped; the whole suite.
set -u
N=335; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/packN.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
t() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$name.log; }
export ATTN_TEST_DUMP_DIR=$R/dump
ATTN_TEST_SEED=8489930180045089453 t seed 60 N/gpu --ignored --exact backward::correctness_backward_99_kib_tile
tar czf $OUT/dump$N.tgz -C $R dump
t suite 300 N/gpu --ignored
