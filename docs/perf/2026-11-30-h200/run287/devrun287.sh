#!/bin/bash
# run 287 (H200): the whole GPU suite on d7092dd + the FP8 default under a shared-memory limit
# (run 286 failed the mma.sync backward above D = 128 on an entry-name bug, fixed in d7092dd),
# then the small-smem and 99 KiB tests under memcheck.
set -u
N=287; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi -q | grep -E "Product Name|Driver Version|Power Limit" | head -4 >> $R/date.txt
s=$(date +%s); timeout 280 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
s=$(date +%s); timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 N/gpu --ignored small_smem > $R/memcheck_small.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/memcheck_small.log
