#!/usr/bin/env python3
"""cuDNN's FP8 (E4M3) SDPA forward, timed on its own: a command-line front for the `cudnn_fp8`
backend of `cargo xtask bench --fp8` (xtask/scripts/sdpa_bench.py, which builds the graph and
times it; read its docstring for the graph, the scales and the output type).

Timing, as `xtask bench` times event-timed rows: 20 warm-up launches, then launches until
`--warmup-ms` (1500) have passed, so the samples run at sustained clocks (docs/PERF.md, runs
216 and 310); then `--samples` launches back to back, each between two CUDA events, and one
synchronization. Prints one JSON object:
{"B,H,S,D[-causal]": {"median_us", "tflops", "samples_us"} or {"error"}, ...}.

Usage: cudnn_fp8_sdpa.py [--samples N] [--warmup-ms MS] B,H,S,D[,causal] ...
"""

import argparse
import json
import os
import statistics
import sys

# The bench script: xtask/scripts in the repository, or beside this one (a bundle's scripts/).
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_here, os.path.join(_here, "..", "xtask", "scripts")]
from sdpa_bench import time_cudnn_fp8  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--warmup-ms", type=float, default=1500.0)
    ap.add_argument("shapes", nargs="+")
    args = ap.parse_args()
    out = {}
    for spec in args.shapes:
        parts = spec.split(",")
        b, h, s, d = (int(x) for x in parts[:4])
        causal = len(parts) > 4 and parts[4] == "causal"
        name = f"{b},{h},{s},{d}" + ("-causal" if causal else "")
        shape = {"b": b, "hq": h, "hkv": h, "sq": s, "sk": s, "d": d, "causal": causal}
        try:
            times, _ = time_cudnn_fp8(shape, 20, args.warmup_ms, args.samples)
            med = statistics.median(times)
            flops = 4 * b * h * s * s * d / (2 if causal else 1)
            out[name] = {"median_us": med, "tflops": flops / med / 1e6, "samples_us": times}
        except Exception as e:  # report, keep going
            out[name] = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
