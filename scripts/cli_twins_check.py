#!/usr/bin/env python3
# The CLI twins on the same .npy files (docs/PERF.md, run 21): xtask backward vs xtask reference --do,
# and xtask forward vs xtask reference with --cu-seqlens-* and with
# --block-table/--seqused-k.
import subprocess, sys, numpy as np, torch, os
out = sys.argv[1]
rng = np.random.default_rng(5)
def w(name, a):
    np.save(os.path.join(out, name), a)
    return os.path.join(out, name)
def run(*a):
    r = subprocess.run(["./xtask", *a], capture_output=True, text=True)
    print(" ".join(a[:1]), "rc", r.returncode, r.stderr.strip()[-300:])
    return r.returncode
def cmp(name, a, b):
    a, b = np.load(a).astype(np.float64), np.load(b).astype(np.float64)
    rel = np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)
    print(f"{name}: max|diff| {np.abs(a-b).max():.3e} relL2 {rel:.3e}")
    return rel
# Backward, bshd, causal bottom-right, GQA 4:2.
B, Hq, Hkv, Sq, Sk, D = 2, 4, 2, 77, 130, 64
q = rng.standard_normal((B, Sq, Hq, D)).astype(np.float32)
k = rng.standard_normal((B, Sk, Hkv, D)).astype(np.float32)
v = rng.standard_normal((B, Sk, Hkv, D)).astype(np.float32)
do = rng.standard_normal((B, Sq, Hq, D)).astype(np.float32)
P = {n: w(n + ".npy", a) for n, a in [("q", q), ("k", k), ("v", v), ("do", do)]}
common = ["--q", P["q"], "--k", P["k"], "--v", P["v"], "--do", P["do"], "--layout", "bshd", "--causal", "bottom-right"]
ok = run("backward", *common, "--dq", out + "/g_dq.npy", "--dk", out + "/g_dk.npy", "--dv", out + "/g_dv.npy", "--dtype", "bf16") == 0
ok &= run("reference", *common, "--out", out + "/r_o.npy", "--dq", out + "/r_dq.npy", "--dk", out + "/r_dk.npy", "--dv", out + "/r_dv.npy") == 0
worst = max(cmp(n, f"{out}/g_{n}.npy", f"{out}/r_{n}.npy") for n in ["dq", "dk", "dv"])
print("backward CLI bf16 worst relL2", worst, "OK" if ok and worst < 2e-2 else "FAIL")
# Varlen forward: Q [total, Hq, D].
cu_q = np.array([0, 5, 5, 70], np.int32); cu_k = np.array([0, 9, 40, 140], np.int32)
qv = rng.standard_normal((70, Hq, D)).astype(np.float32); kv = rng.standard_normal((140, Hkv, D)).astype(np.float32); vv = rng.standard_normal((140, Hkv, D)).astype(np.float32)
a = ["--q", w("qv.npy", qv), "--k", w("kv.npy", kv), "--v", w("vv.npy", vv), "--cu-seqlens-q", w("cq.npy", cu_q), "--cu-seqlens-k", w("ck.npy", cu_k), "--causal", "bottom-right", "--window", "20,0"]
ok = run("forward", *a, "--out", out + "/g_ov.npy", "--lse", out + "/g_lv.npy") == 0
ok &= run("reference", *a, "--out", out + "/r_ov.npy", "--lse", out + "/r_lv.npy") == 0
r1 = cmp("varlen O", out + "/g_ov.npy", out + "/r_ov.npy")
print("varlen CLI f16 relL2", r1, "OK" if ok and r1 < 2e-3 else "FAIL")
# Paged forward: Q [B, Hq, Sq, D], caches [blocks, 16, Hkv, D].
blocks, ps = 20, 16
qp = rng.standard_normal((3, Hq, 2, D)).astype(np.float32)
kc = rng.standard_normal((blocks, ps, Hkv, D)).astype(np.float32); vc = rng.standard_normal((blocks, ps, Hkv, D)).astype(np.float32)
table = rng.permutation(blocks)[:12].reshape(3, 4).astype(np.int32); used = np.array([50, 0, 64], np.int32)
a = ["--q", w("qp.npy", qp), "--k", w("kc.npy", kc), "--v", w("vc.npy", vc), "--block-table", w("t.npy", table), "--seqused-k", w("u.npy", used), "--causal", "bottom-right"]
ok = run("forward", *a, "--out", out + "/g_op.npy") == 0
ok &= run("reference", *a, "--out", out + "/r_op.npy") == 0
r2 = cmp("paged O", out + "/g_op.npy", out + "/r_op.npy")
print("paged CLI f16 relL2", r2, "OK" if ok and r2 < 2e-3 else "FAIL")
