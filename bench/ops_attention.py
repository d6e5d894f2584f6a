"""Host attention forward and forward + backward vs torch scaled_dot_product_attention.

Shape: 4 sequences x 512 tokens, causal, GQA 8 query / 4 KV heads, head dim 64 (--quick: 1 x 128).
torch: per sequence, SDPA with is_causal=True on K/V expanded to the query heads
(repeat_interleave, as Hugging Face's repeat_kv), forward alone and forward + backward via
autograd. dataflow: attention, and attention + attention_bwd. GFLOP/s counts the causal matmul
work: forward 4 * n^2/2 * d per head and sequence (QK^T and PV), backward 2.5x that (dV, dP,
dS->dQ, dS->dK), as FlashAttention reports.

    python bench/ops_attention.py [--threads 2] [--dtypes fp32,bf16] [--quick]
"""
import numpy as np
import torch

import harness
from harness import Case

df = harness.import_dataflow()


def _cases(h, dtype, s, n, hq, hkv, d):
    total, group = n * s, hq // hkv
    rng = np.random.default_rng(0)
    host = [rng.standard_normal((total, heads, d)).astype(np.float32) for heads in (hq, hkv, hkv, hq)]
    cu = h.from_numpy(np.arange(0, total + 1, n, dtype=np.int32))
    tdt = getattr(torch, harness.TORCH_DTYPES[dtype])
    tq, tk, tv, tdo = (torch.from_numpy(x).to(tdt) for x in host)

    def torch_attention(backward):
        for i in range(s):
            sl = slice(i * n, (i + 1) * n)
            q = tq[sl].transpose(0, 1).requires_grad_(backward)
            k = tk[sl].transpose(0, 1).requires_grad_(backward)
            v = tv[sl].transpose(0, 1).requires_grad_(backward)
            o = torch.nn.functional.scaled_dot_product_attention(
                q, k.repeat_interleave(group, 0), v.repeat_interleave(group, 0), is_causal=True)
            if backward:
                o.backward(tdo[sl].transpose(0, 1))

    q, k, v, dout = (h.from_numpy(x, dtype=dtype) for x in host)
    out, lse = df.ops.attention(h, q, k, v, cu)
    dq, dk, dv = (h.empty(x.shape, dtype) for x in (q, k, v))
    ws = h.empty((df.ops.opslib.dataflow_attention_bwd_workspace_bytes(total, s, hq, hkv, d),), "uint8")

    def df_fwd():
        df.ops.attention(h, q, k, v, cu, out=out, lse=lse)

    def df_fwd_bwd():
        df_fwd()
        df.ops.attention_bwd(h, dout, q, k, v, out, lse, cu, dq=dq, dk=dk, dv=dv, workspace=ws)

    shape = f"{s}x{n} causal, q{hq}/kv{hkv} heads x {d}"
    fwd_flops = 4 * (n * (n + 1) / 2) * d * hq * s
    peer = "per sequence F.scaled_dot_product_attention(is_causal=True), K/V repeat_interleave"
    return [
        Case("attention", "fwd", dtype, shape, harness.synced(h, df_fwd), lambda: torch_attention(False), peer,
             flops=fwd_flops),
        Case("attention", "fwd+bwd", dtype, shape, harness.synced(h, df_fwd_bwd), lambda: torch_attention(True),
             peer + ", autograd backward", flops=3.5 * fwd_flops),
    ]


def cases(h, args):
    s, n = (1, 128) if args.quick else (4, 512)
    for dtype in args.dtypes:
        yield from _cases(h, dtype, s, n, hq=8, hkv=4, d=64)


if __name__ == "__main__":
    harness.main({"attention": cases})
