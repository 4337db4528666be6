# SDPA forward and backward timings (PyTorch autograd through the flash and cuDNN backends),
# CUDA events around each call, for `cargo xtask train-bench`. Prints one JSON object.
import json, sys, time
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
import torch.nn.functional as F

shapes = json.loads(sys.argv[1])  # [[B, H, S, D, causal], ...]
warmup, iters = int(sys.argv[2]), int(sys.argv[3])
# Steps before the counted warm-up until this many ms have passed (sustained clocks, as our side).
warmup_ms = float(sys.argv[4]) if len(sys.argv) > 4 else 500.0
out = []
for b, h, s, d, causal in shapes:
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    for name, backend in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]:
        try:
            with sdpa_kernel(backend):
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < warmup_ms / 1000.0:
                    for _ in range(8):
                        F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)).backward(do)
                    torch.cuda.synchronize()
                    q.grad = k.grad = v.grad = None
                fwd, bwd = [], []
                for i in range(warmup + iters):
                    e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
                    e[0].record()
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                    e[1].record()
                    o.backward(do)
                    e[2].record()
                    torch.cuda.synchronize()
                    q.grad = k.grad = v.grad = None
                    if i >= warmup:
                        fwd.append(e[0].elapsed_time(e[1]) * 1e3)
                        bwd.append(e[1].elapsed_time(e[2]) * 1e3)
            out.append(dict(shape=[b, h, s, d, causal], backend=name, fwd_us=fwd, bwd_us=bwd))
        except Exception as ex:  # a backend that does not take the shape
            out.append(dict(shape=[b, h, s, d, causal], backend=name, error=str(ex)[:200]))
print(json.dumps(out))
