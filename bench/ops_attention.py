"""Attention forward and forward + backward vs torch scaled_dot_product_attention.

Host shape: 4 sequences x 512 tokens, causal, GQA 8 query / 4 KV heads, head dim 64 (--quick:
1 x 128). torch: per sequence, SDPA with is_causal=True on K/V expanded to the query heads
(repeat_interleave, as Hugging Face's repeat_kv), forward alone and forward + backward via
autograd.
GPU shape (--backend cuda): one sequence of 8192 tokens, causal, GQA 32 query / 8 KV heads
(4:1), head dim 128. torch: SDPA restricted to its flash kernel (sdpa_kernel(FLASH_ATTENTION);
fp32, which flash lacks: SDPA's own choice) on K/V expanded to the query heads before the timed
calls, so torch's time is the kernels alone. The row's note says which implementation dataflow
chose (cuDNN SDPA, its mma kernels or SIMT: dataflow.cuda.attention_last_choice()).
dataflow: attention, and attention + attention_bwd. GFLOP/s counts the causal matmul work:
forward 4 * n^2/2 * d per head and sequence (QK^T and PV), backward 2.5x that (dV, dP, dS->dQ,
dS->dK), as FlashAttention reports.

    python bench/ops_attention.py [--backend host] [--threads 2] [--dtypes fp32,bf16] [--quick]
"""
import contextlib

import numpy as np

import harness
from harness import Case

harness.require_peers("torch")  # before importing it: a missing torch is one line, not a traceback
import torch  # noqa: E402

df = harness.import_dataflow()


def _torch_per_sequence(tq, tk, tv, tdo, s, n, group):
    peer = "per sequence F.scaled_dot_product_attention(is_causal=True), K/V repeat_interleave"

    def run(backward):
        for i in range(s):
            sl = slice(i * n, (i + 1) * n)
            q = tq[sl].transpose(0, 1).requires_grad_(backward)
            k = tk[sl].transpose(0, 1).requires_grad_(backward)
            v = tv[sl].transpose(0, 1).requires_grad_(backward)
            o = torch.nn.functional.scaled_dot_product_attention(
                q, k.repeat_interleave(group, 0), v.repeat_interleave(group, 0), is_causal=True)
            if backward:
                o.backward(tdo[sl].transpose(0, 1))
    return run, peer


def _torch_flash(tq, tk, tv, tdo, group, dtype):
    """One sequence as (1, heads, n, d) views; K/V expanded once, outside the timed calls."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q = tq.transpose(0, 1).unsqueeze(0).detach().requires_grad_()
    k, v = (x.repeat_interleave(group, 1).transpose(0, 1).unsqueeze(0).detach().requires_grad_() for x in (tk, tv))
    do = tdo.transpose(0, 1).unsqueeze(0)
    flash = dtype != "fp32"

    def run(backward):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION) if flash else contextlib.nullcontext():
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            if backward:
                q.grad = k.grad = v.grad = None  # written, not accumulated, as dataflow's
                o.backward(do)
    what = "SDPA flash kernel" if flash else "SDPA (its choice; flash has no fp32)"
    return run, f"F.scaled_dot_product_attention(is_causal=True), {what}, K/V expanded before timing"


def _cases(h, dtype, s, n, hq, hkv, d):
    total, group = n * s, hq // hkv
    rng = np.random.default_rng(0)
    host = [rng.standard_normal((total, heads, d)).astype(np.float32) for heads in (hq, hkv, hkv, hq)]
    cu = h.from_numpy(np.arange(0, total + 1, n, dtype=np.int32))
    tdt = getattr(torch, harness.TORCH_DTYPES[dtype])
    tq, tk, tv, tdo = (harness.tensor(x).to(tdt) for x in host)
    if harness.DEVICE == "cpu":
        torch_attention, peer = _torch_per_sequence(tq, tk, tv, tdo, s, n, group)
    else:
        torch_attention, peer = _torch_flash(tq, tk, tv, tdo, group, dtype)

    q, k, v, dout = (h.from_numpy(x, dtype=dtype) for x in host)
    out, lse = df.ops.attention(h, q, k, v, cu)
    dq, dk, dv = (h.empty(x.shape, dtype) for x in (q, k, v))
    ws = h.empty((df.ops.opslib.dataflow_attention_bwd_workspace_bytes(total, s, hq, hkv, d),), "uint8")
    note = None
    if harness.DEVICE != "cpu":
        from dataflow import cuda
        note = cuda.attention_last_choice  # read after the timed calls: what the last submission ran

    def df_fwd():
        df.ops.attention(h, q, k, v, cu, out=out, lse=lse)

    def df_fwd_bwd():
        df_fwd()
        df.ops.attention_bwd(h, dout, q, k, v, out, lse, cu, dq=dq, dk=dk, dv=dv, workspace=ws)

    shape = f"{s}x{n} causal, q{hq}/kv{hkv} heads x {d}"
    fwd_flops = 4 * (n * (n + 1) / 2) * d * hq * s
    return [
        Case("attention", "fwd", dtype, shape, harness.synced(h, df_fwd), lambda: torch_attention(False), peer,
             flops=fwd_flops, note=note),
        Case("attention", "fwd+bwd", dtype, shape, harness.synced(h, df_fwd_bwd), lambda: torch_attention(True),
             peer + ", autograd backward", flops=3.5 * fwd_flops, note=note),
    ]


def cases(h, args):
    if harness.DEVICE != "cpu" and not args.quick:
        shape = dict(s=1, n=8192, hq=32, hkv=8, d=128)
    else:
        shape = dict(s=1, n=128, hq=8, hkv=4, d=64) if args.quick else dict(s=4, n=512, hq=8, hkv=4, d=64)
    for dtype in args.dtypes:
        yield from _cases(h, dtype, **shape)


if __name__ == "__main__":
    harness.main({"attention": cases})
