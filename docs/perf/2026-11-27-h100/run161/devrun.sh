#!/bin/bash
# run 161: tanh.approx.f32's relative error against f64 tanh (mean, bias, max, per-range), beside roundings to 11 and 10 significant bits — the model attn-ref's emulation uses for the softcap's tanh.
set -u
N=161; R=/tmp/r$N; mkdir -p $R
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
nvcc -O3 -arch=sm_90a -o /tmp/probe target/tanhprobe/probe.cu > $R/build.log 2>&1; echo "rc=$?" >> $R/build.log
timeout 60 /tmp/probe > $R/probe.log 2>&1; echo "rc=$?" >> $R/probe.log
tar czf $OUT/logs$N.tgz -C /tmp r$N
