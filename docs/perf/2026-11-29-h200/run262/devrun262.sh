#!/bin/bash
# run 262 (H200): compute-sanitizer's four tools on the every-bucket feature test, on the
# landing build (829e48e: the feature entries on the default ping-pong tiles at D = 160-256).
set -u
N=262; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
for tool in memcheck synccheck initcheck racecheck; do
  s=$(date +%s); timeout 45 compute-sanitizer --tool $tool F/gpu --ignored features::correctness_features_every_bucket > $R/$tool.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/$tool.log
done
