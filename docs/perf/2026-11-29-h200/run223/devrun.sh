#!/bin/bash
# run 223 (H200): D = 128's dense default tiles at sustained clocks: the 176-key wide tile
# (default from 1024 keys) against the 128-key ping-pong tile, f16 and bf16, four shapes, two
# rounds. xtask of run 219.
set -u
N=223; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack219.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $R/date.txt
run() { # name, args...
  local n=$1; shift
  timeout 30 N/xtask bench "$@" --samples 200 --no-sdpa --out-dir $R/o_$n > $R/$n.log 2>&1
  echo "$n $(grep -h '^|' $R/$n.log | grep -v -- '---' | tail -n +2 | awk -F'|' '{print $2, $5}' | tr '\n' ' ')" >> $R/summary.txt
}
for i in 1 2; do
  for dt in f16 bf16; do
    for sh in 4,16,4096,128 1,16,16384,128 2,16,8192,128 8,16,2048,128; do
      for c in wg128_176_s2_pp_ia wg128_128_s2_pp_ia; do
        run ${dt}_${sh}_${c}_$i --shape $sh --dtype $dt --config $c
      done
    done
  done
done
