#!/bin/bash
# run 284 (H200): the whole GPU suite on the landing build (run 282's pack: 47c98ed's code;
# later commits change docs and comments only).
set -u
N=284; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack282.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
s=$(date +%s); timeout 250 N/gpu --ignored > $R/suite.log 2>&1; echo "rc=$? secs=$(( $(date +%s) - s ))" >> $R/suite.log
