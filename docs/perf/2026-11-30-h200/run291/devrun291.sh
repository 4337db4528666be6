#!/bin/bash
# run 291 (H200): run 289's failing seed of the CUDA-graph paged decode test on the previous
# session's landing build (run 282's pack, 47c98ed's kernels): does the base miss it too?
set -u
N=291; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack282.txz -C $P
trap 'tar czf $OUT/logs$N.tgz -C /tmp r$N' EXIT
cd $P
date -u > $R/date.txt
T=seqs::correctness_seqs_paged_decode_in_a_cuda_graph
ls $P > $R/pack_contents.txt
B=$(ls -d $P/*/ | head -1)
ATTN_TEST_SEED=5695254344514003037 timeout 60 $B/gpu --ignored --exact $T > $R/base_same_seed.log 2>&1; echo "rc=$?" >> $R/base_same_seed.log
