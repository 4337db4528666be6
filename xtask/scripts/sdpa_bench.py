#!/usr/bin/env python3
"""Times torch.nn.functional.scaled_dot_product_attention, one backend at a time (flash,
efficient, cudnn), with the protocol of `cargo xtask bench`: random N(0,1)
inputs rotated across sets when they fit in L2, warm-up, then one CUDA event pair around each
call, all enqueued back to back and synchronized once at the end.

Usage: sdpa_bench.py --spec SPEC.json --out-dir DIR [--warmup N] [--warmup-ms MS] [--samples N]
SPEC.json: [{"name": "1,8,512,64-causal", "b":1, "hq":8, "hkv":8, "sq":512, "sk":512,
             "d":64, "causal": true, "dtype": "f16"}, ...]
Writes DIR/samples/<name>-sdpa_<backend>.csv (one µs sample per line) and DIR/sdpa.json.
Needs python3 + torch only.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}
L2_BYTES = 50 * 1024 * 1024


def time_backend(shape, backend, warmup, warmup_ms, samples):
    dt = torch.float16 if shape["dtype"] == "f16" else torch.bfloat16
    b, hq, hkv, sq, sk, d = (shape[k] for k in ("b", "hq", "hkv", "sq", "sk", "d"))
    bytes_per_set = 2 * (b * hq * sq * d * 2 + 2 * b * hkv * sk * d)
    sets = max(1, min(8, math.ceil(2 * L2_BYTES / bytes_per_set)))
    inputs = []
    for _ in range(sets):
        q = torch.randn(b, hq, sq, d, device="cuda", dtype=dt)
        k = torch.randn(b, hkv, sk, d, device="cuda", dtype=dt)
        v = torch.randn(b, hkv, sk, d, device="cuda", dtype=dt)
        inputs.append((q, k, v))
    kwargs = {"is_causal": bool(shape["causal"])}
    if hq != hkv:
        kwargs["enable_gqa"] = True
    call = lambda i: F.scaled_dot_product_attention(*inputs[i % sets], **kwargs)
    with sdpa_kernel([BACKENDS[backend]]):
        for i in range(warmup):
            call(i)
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(samples)]
        if shape.get("method") == "graph":
            # Same method as our side: one sample = one replay of a graph of G launches / G.
            g_launches = int(shape.get("graph_launches", 20))
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for i in range(3):
                    call(i)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for i in range(g_launches):
                    call(i)
            for _ in range(max(2, warmup // g_launches)):
                graph.replay()
            torch.cuda.synchronize()
            for s, e in events:
                s.record()
                graph.replay()
                e.record()
            torch.cuda.synchronize()
            return [s.elapsed_time(e) * 1000.0 / g_launches for s, e in events], sets
        # Event-timed launches: on to sustained clocks first, as our side does (a GPU at its
        # power cap lowers its clocks tens of ms into sustained load).
        t0 = time.perf_counter()
        i = warmup
        while time.perf_counter() - t0 < warmup_ms / 1000.0:
            for _ in range(8):
                call(i)
                i += 1
            torch.cuda.synchronize()
        for i, (s, e) in enumerate(events):
            s.record()
            call(i)
            e.record()
        torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1000.0 for s, e in events], sets


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--warmup-ms", type=float, default=500.0)
    ap.add_argument("--samples", type=int, default=300)
    a = ap.parse_args()
    with open(a.spec) as f:
        spec = json.load(f)
    os.makedirs(os.path.join(a.out_dir, "samples"), exist_ok=True)
    results = []
    for shape in spec:
        for backend in BACKENDS:
            entry = {"name": shape["name"], "backend": "sdpa_" + backend}
            try:
                us, sets = time_backend(shape, backend, a.warmup, a.warmup_ms, a.samples)
            except Exception as e:  # a backend that does not support the shape
                entry["error"] = str(e).splitlines()[0][:200]
                results.append(entry)
                print(f"{shape['name']} sdpa_{backend}: unsupported ({entry['error']})", file=sys.stderr)
                continue
            path = os.path.join(a.out_dir, "samples", f"{shape['name']}-sdpa_{backend}.csv")
            with open(path, "w") as f:
                f.write("\n".join(f"{x:.4f}" for x in us) + "\n")
            us_sorted = sorted(us)
            entry.update({"csv": path, "median_us": us_sorted[len(us) // 2], "input_sets": sets, "n": len(us)})
            results.append(entry)
    out = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "method": "events",
        "results": results,
    }
    with open(os.path.join(a.out_dir, "sdpa.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
