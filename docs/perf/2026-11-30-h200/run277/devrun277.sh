#!/bin/bash
# run 277 (H200): run 276's build (7e072f4's code): compute-sanitizer memcheck on
# seqs::correctness_seqs_paged, whose D = 256 launches over pages of 256 run the new 64-key tile.
set -u
N=277; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack276.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
s=$(date +%s); timeout 240 compute-sanitizer --tool memcheck N/gpu --ignored correctness_seqs_paged > $R/memcheck_paged.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/memcheck_paged.log
