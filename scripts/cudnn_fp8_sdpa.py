#!/usr/bin/env python3
"""cuDNN's FP8 (E4M3) SDPA forward, timed: the FP8 baseline of `cargo xtask bench --fp8`.

Needs torch and `nvidia-cudnn-frontend` (1.32, installed with --no-deps beside
`apache-tvm-ffi`; docs/PERF.md says how the GPU runs install them). Per-tensor scales of 1,
N(0,1) inputs cast to E4M3, inference mode (no stats). On Hopper cuDNN writes O in E4M3 (our
kernels write f16: 2 bytes per output element instead of 1).

Timing, as `xtask bench` times our side: 20 warm-up launches, then launches until
`--warmup-ms` (1500) have passed, so the samples run at sustained clocks (a GPU at its power cap
lowers them tens of ms into sustained load; docs/PERF.md, run 216); then `--samples` launches
back to back, each between two CUDA events, and one synchronization. (Until run 220 each sample
synchronized before the next launch, a lower duty cycle than our side's.) The median in
microseconds, and every sample. Prints one JSON object:
{"B,H,S,D[-causal]": {"median_us", "tflops", "samples_us"}, ...}.

Usage: cudnn_fp8_sdpa.py [--samples N] [--warmup-ms MS] B,H,S,D[,causal] ...
"""

import argparse
import json
import math
import statistics
import time

import cudnn
import torch


def build(handle, b, h, s, d, causal):
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--warmup-ms", type=float, default=1500.0)
    ap.add_argument("shapes", nargs="+")
    args = ap.parse_args()
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    out = {}
    for spec in args.shapes:
        parts = spec.split(",")
        b, h, s, d = (int(x) for x in parts[:4])
        causal = len(parts) > 4 and parts[4] == "causal"
        name = f"{b},{h},{s},{d}" + ("-causal" if causal else "")
        try:
            graph, pack, ws = build(handle, b, h, s, d, causal)
            for _ in range(20):
                graph.execute(pack, ws, handle=handle)
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < args.warmup_ms / 1000.0:
                for _ in range(8):
                    graph.execute(pack, ws, handle=handle)
                torch.cuda.synchronize()
            events = [
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                for _ in range(args.samples)
            ]
            for start, end in events:
                start.record()
                graph.execute(pack, ws, handle=handle)
                end.record()
            torch.cuda.synchronize()
            times = [start.elapsed_time(end) * 1e3 for start, end in events]
            med = statistics.median(times)
            flops = 4 * b * h * s * s * d / (2 if causal else 1)
            out[name] = {"median_us": med, "tflops": flops / med / 1e6, "samples_us": times}
        except Exception as e:  # report, keep going
            out[name] = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
