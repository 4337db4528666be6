#!/bin/bash
# run 185 (H200): the one-row decode, measurement only (HEAD + `bench --timing`): our decode
# and SDPA's backends event-timed and graph-timed in one call, twice; our split counts 4–32
# (graph-timed); ncu of the decode kernel; the read ceiling (torch sum / copy of the same bytes).
set -u
N=185; R=/tmp/r$N; P=/tmp/p$N
mkdir -p $R $P; tar xJf target/pack$N.txz -C $P; cd $P
date -u > $R/date.txt; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> $R/date.txt
X=A/xtask
for i in 1 2; do for t in events graph; do
  timeout 120 $X bench --shapes decode --dtype f16 --samples 200 --timing $t --out-dir $R/bench_${t}_$i > $R/bench_${t}_$i.log 2>&1; echo "rc=$?" >> $R/bench_${t}_$i.log
done; done
for s in 4 6 8 12 16 32; do
  timeout 60 $X bench --shapes decode --dtype f16 --samples 200 --timing graph --no-sdpa --splits $s --out-dir $R/splits_$s > $R/splits_$s.log 2>&1; echo "rc=$?" >> $R/splits_$s.log
done
cat > $R/ceiling.py <<'PY'
import torch
n = 2 * 32 * 8192 * 128  # K and V elements of 1,32,8192,128
x = torch.randn(n, dtype=torch.float16, device="cuda")
y = torch.empty_like(x)
def timed(f, g=20, samples=50):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): f()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(g): f()
    for _ in range(3): graph.replay()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(samples)]
    for a, b in ev:
        a.record(); graph.replay(); b.record()
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) * 1000 / g for a, b in ev)
    return t[len(t) // 2]
r = timed(lambda: x.view(-1, 8192).sum(dim=1))
c = timed(lambda: y.copy_(x))
print(f"bytes {2*n}: sum {r:.2f} us ({2*n/r/1e6:.2f} TB/s read); copy {c:.2f} us ({2*n/c/1e6:.2f} TB/s read, {4*n/c/1e6:.2f} read+write)")
PY
timeout 60 python3 $R/ceiling.py > $R/ceiling.log 2>&1
timeout 200 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section SourceCounters --import-source no -k regex:decode --launch-skip 3 --launch-count 1 --export $R/decode $X bench --shapes decode --dtype f16 --once --no-sdpa > $R/ncu.log 2>&1
ncu --import $R/decode.ncu-rep --page details > $R/decode_details.txt 2>&1
ncu --import $R/decode.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $R/decode_source.csv.gz
rm -f $R/decode.ncu-rep
tar czf $OUT/logs$N.tgz -C /tmp r$N
