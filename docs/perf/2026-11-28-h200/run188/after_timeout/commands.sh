#!/bin/bash
# Run 188's script hit the 600 s limit during its A/B step (each bench process loads the whole
# all-dims fatbin), so its SDPA, sanitizer and suite steps never ran. These three follow-up
# device calls ran on the same warm machine, on B's binaries left in /tmp/p188:
cd /tmp/p188
timeout 200 B/gpu --ignored seqs::correctness_seqs_decode seqs::correctness_seqs_paged_decode_in_a_cuda_graph seqs::validation_decode_refusals_write_nothing > decode_tests.log 2>&1
for sh in "2,8:2,3x300,160" "2,8:1,5x700,256"; do n=$(echo $sh | tr ',:' '__'); timeout 75 compute-sanitizer --tool memcheck --error-exitcode 9 B/xtask bench --shape "$sh" --dtype both --once --no-sdpa --splits 3 > memcheck_$n.log 2>&1; echo "rc=$?" >> memcheck_$n.log; done
for t in racecheck synccheck; do for sh in "2,8:2,3x300,160" "2,8:1,5x700,256" "1,4,1x1000,224"; do n=$(echo $sh | tr ',:' '__'); timeout 40 compute-sanitizer --tool $t --error-exitcode 9 B/xtask bench --shape "$sh" --dtype both --once --no-sdpa --splits 3 > ${t}_$n.log 2>&1; echo "rc=$?" >> ${t}_$n.log; done; done
timeout 30 B/xtask bench --shape "2,8:1,5x700,256" --dtype f16 --samples 5 --warmup 1 --no-sdpa --timing events > kernel_name.log 2>&1
