#!/usr/bin/env python3
"""Times torch.nn.functional.scaled_dot_product_attention, one backend at a time (flash,
efficient, cudnn), with the protocol of `cargo xtask bench`: random N(0,1)
inputs rotated across sets when they fit in L2, warm-up, then one CUDA event pair around each
call, all enqueued back to back and synchronized once at the end.

Entries of dtype "fp8" are timed on cuDNN's FP8 (E4M3) SDPA instead (backend `cudnn_fp8`,
`graph.sdpa_fp8` of `nvidia-cudnn-frontend`, installed with --no-deps beside
`apache-tvm-ffi`): per-tensor scales of 1, N(0,1) inputs cast to E4M3, inference mode (no
stats). On Hopper cuDNN writes O in E4M3, one byte per output element; our FP8 forward writes
f16, two. Without the frontend those entries record why they did not run.

Usage: sdpa_bench.py --spec SPEC.json --out-dir DIR [--warmup N] [--warmup-ms MS] [--samples N]
SPEC.json: [{"name": "1,8,512,64-causal", "b":1, "hq":8, "hkv":8, "sq":512, "sk":512,
             "d":64, "causal": true, "dtype": "f16"}, ...]
Writes DIR/samples/<name>-<backend>.csv (one µs sample per line; backend sdpa_flash,
sdpa_efficient, sdpa_cudnn or cudnn_fp8) and DIR/sdpa.json.
Needs python3 + torch (and the cuDNN frontend for the FP8 entries).
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
    # PyTorch's is_causal is the upper-left (top-left) mask; a bottom-right row with Sq != Sk
    # (chunked prefill, decode) sees far more keys, so it takes the lower-right bias instead
    # (each backend runs it or says it cannot). Before 2026-12-01 (run 349) such rows timed
    # SDPA on the top-left mask, a fraction of our side's work.
    if shape["causal"] and shape.get("bottom_right") and sq != sk:
        from torch.nn.attention.bias import causal_lower_right

        kwargs = {"attn_mask": causal_lower_right(sq, sk)}
    else:
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
        return sustained_event_samples(call, warmup, warmup_ms, events), sets


def sustained_event_samples(call, first, warmup_ms, events):
    """Event-timed samples of `call(i)` (i from `first` on): on to sustained clocks first, as
    our side does (a GPU at its power cap lowers its clocks tens of ms into sustained load),
    then one event pair around each call, all enqueued back to back; in µs."""
    t0 = time.perf_counter()
    i = first
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
    return [s.elapsed_time(e) * 1000.0 for s, e in events]


def build_cudnn_fp8(handle, b, h, s, d, causal):
    """cuDNN's FP8 SDPA forward graph for [b, h, s, d] E4M3 Q, K, V (E4M3 O), with its
    variant pack and workspace."""
    import cudnn

    e4m3, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
    graph = cudnn.pygraph(
        io_data_type=e4m3, intermediate_data_type=f32, compute_data_type=f32, handle=handle
    )
    dims, strides = [b, h, s, d], [h * s * d, s * d, d, 1]
    qt, kt, vt = (graph.tensor(dim=dims, stride=strides, data_type=e4m3) for _ in range(3))
    scalars = [graph.tensor(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=f32) for _ in range(6)]
    kwargs = dict(attn_scale=1.0 / math.sqrt(d), use_causal_mask=causal)
    try:
        outs = graph.sdpa_fp8(qt, kt, vt, *scalars, generate_stats=False, **kwargs)
    except TypeError:  # older spelling of the same option
        outs = graph.sdpa_fp8(qt, kt, vt, *scalars, is_inference=True, **kwargs)
    o_t, _, amax_s_t, amax_o_t = outs
    o_t.set_output(True).set_dim(dims).set_stride(strides).set_data_type(e4m3)
    for a in (amax_s_t, amax_o_t):
        a.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(f32)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()

    def fp8(*shape):
        return torch.randn(*shape, device="cuda").to(torch.float8_e4m3fn)

    one = torch.ones(1, 1, 1, 1, dtype=torch.float32, device="cuda")
    pack = {qt: fp8(*dims), kt: fp8(*dims), vt: fp8(*dims)}
    pack.update({t: one for t in scalars})
    pack[o_t] = torch.empty(*dims, dtype=torch.float8_e4m3fn, device="cuda")
    pack[amax_s_t] = torch.empty(1, 1, 1, 1, dtype=torch.float32, device="cuda")
    pack[amax_o_t] = torch.empty(1, 1, 1, 1, dtype=torch.float32, device="cuda")
    workspace = torch.empty(graph.get_workspace_size(), dtype=torch.uint8, device="cuda")
    return graph, pack, workspace


def cudnn_fp8_unsupported(shape):
    """Why the cuDNN FP8 graph cannot time `shape` with our side's method, or None."""
    if shape["hq"] != shape["hkv"] or shape["sq"] != shape["sk"]:
        return "the cuDNN FP8 graph here takes Hq = Hkv and Sq = Sk only"
    if shape.get("method") == "graph":
        return "cuDNN FP8 is event-timed only; this row's launches are graph-timed"
    return None


def time_cudnn_fp8(shape, warmup, warmup_ms, samples):
    """cuDNN's FP8 SDPA on `shape`, by the event protocol of time_backend."""
    why = cudnn_fp8_unsupported(shape)
    if why:
        raise ValueError(why)
    import cudnn

    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    b, h, s, d = (shape[k] for k in ("b", "hq", "sq", "d"))
    graph, pack, ws = build_cudnn_fp8(handle, b, h, s, d, bool(shape["causal"]))
    call = lambda _i: graph.execute(pack, ws, handle=handle)
    for i in range(warmup):
        call(i)
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(samples)]
    return sustained_event_samples(call, warmup, warmup_ms, events), 1


def backends_of(shape):
    """(backend name, timing function) pairs for one spec entry."""
    if shape["dtype"] == "fp8":
        return [("cudnn_fp8", time_cudnn_fp8)]
    return [
        ("sdpa_" + b, lambda sh, w, wm, n, b=b: time_backend(sh, b, w, wm, n)) for b in BACKENDS
    ]


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
        for backend, timed in backends_of(shape):
            entry = {"name": shape["name"], "backend": backend}
            try:
                us, sets = timed(shape, a.warmup, a.warmup_ms, a.samples)
            except Exception as e:  # a backend that does not support the shape, or is missing
                first = (str(e).splitlines() or [""])[0]
                entry["error"] = f"{type(e).__name__}: {first}"[:200]
                results.append(entry)
                print(f"{shape['name']} {backend}: unsupported ({entry['error']})", file=sys.stderr)
                continue
            path = os.path.join(a.out_dir, "samples", f"{shape['name']}-{backend}.csv")
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
