#!/bin/bash
# run 196 (H200): the final build (797b9e3): compute-sanitizer on the three-consumer FP8 D = 64
# tile (wg192_128_s2_ia), both masks, before it becomes the D = 64 default.
set -u
N=196; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack194.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
for t in racecheck synccheck memcheck; do for c in none bottom-right; do
  timeout 40 compute-sanitizer --tool $t --error-exitcode 9 B/xtask bench --shape 2,4:2,333,64 --causal $c --fp8 hopper --fp8-config wg192_128_s2_ia --once --no-sdpa > $R/${t}_$c.log 2>&1; echo "rc=$?" >> $R/${t}_$c.log
done; done
