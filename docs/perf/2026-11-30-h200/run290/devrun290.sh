#!/bin/bash
# run 290 (H200): run 289's one failure (a one-element tolerance miss in the CUDA-graph paged
# decode test) again: the same seed, then three fresh seeds.
set -u
N=290; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack289.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
T=seqs::correctness_seqs_paged_decode_in_a_cuda_graph
ATTN_TEST_SEED=5695254344514003037 timeout 60 N/gpu --ignored --exact $T > $R/same_seed.log 2>&1; echo "rc=$?" >> $R/same_seed.log
for i in 1 2 3; do timeout 60 N/gpu --ignored --exact $T > $R/fresh_$i.log 2>&1; echo "rc=$?" >> $R/fresh_$i.log; done
