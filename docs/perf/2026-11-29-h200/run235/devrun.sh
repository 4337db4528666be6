#!/bin/bash
# run 235 (H200): where the walking entry's extra stall cycles are. ncu source counters (warp
# stall samples per SASS instruction) on one launch each of the 128-key bf16 tile at
# 4,16,4096,128, one item per CTA: O = 636dc2e (one-item entry), W = run 228's build (walking).
set -u
N=235; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
for b in O W; do
  sc=""; [ $b = W ] && sc="--schedule grid"
  ncu --section SourceCounters --section WarpStateStats -k regex:attn_fwdh --launch-skip 2 --launch-count 1 -o $R/rep_$b $b/xtask bench --shape 4,16,4096,128 --dtype bf16 --no-sdpa --samples 3 --warmup 1 $sc > $R/ncu_$b.log 2>&1
  ncu -i $R/rep_$b.ncu-rep --page source --csv --print-source sass > $R/src_$b.csv 2> $R/src_$b.err
  ncu -i $R/rep_$b.ncu-rep --page details --print-details all > $R/details_$b.txt 2>&1
  gzip $R/src_$b.csv; rm -f $R/rep_$b.ncu-rep
done
