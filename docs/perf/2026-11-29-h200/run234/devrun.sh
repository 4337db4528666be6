#!/bin/bash
# run 234 (H200): why a walking entry pays per item. ncu sections (warp states, scheduler,
# instruction and memory stats) on one launch each of the 128-key bf16 tile at 4,16,4096,128:
# O = 636dc2e (one item per CTA), W = run 228's build (the same tile walking, O stored from
# registers), both one CTA per item (W: --schedule grid).
set -u
N=234; R=/tmp/r$N; P=/tmp/p$N; ROOT=$(pwd)
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
SEC="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis --section LaunchStats"
ncu $SEC -k regex:attn_fwdh --launch-skip 2 --launch-count 1 O/xtask bench --shape 4,16,4096,128 --dtype bf16 --no-sdpa --samples 3 --warmup 1 > $R/ncu_O.log 2>&1
ncu $SEC -k regex:attn_fwdh --launch-skip 2 --launch-count 1 W/xtask bench --shape 4,16,4096,128 --dtype bf16 --no-sdpa --samples 3 --warmup 1 --schedule grid > $R/ncu_W.log 2>&1
