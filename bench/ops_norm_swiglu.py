"""rms_norm / rms_norm backward / swiglu / swiglu backward vs PyTorch CPU eager.

Shapes (a TinyLlama-sized layer): 4 x 512 tokens, hidden 2048, ffn 5632 (--quick: 256 tokens,
hidden 512, ffn 1408). Peers:
  rms_norm      Hugging Face LlamaRMSNorm.forward (fp32 math, weight * normed.to(dtype))
  rms_norm_bwd  autograd of that module for dx and dw (graph kept); ours: bwd_x then bwd_w
                (partials + reduce over a preallocated workspace)
  swiglu        F.silu(gate) * up
  swiglu_bwd    autograd of F.silu(gate) * up for d_gate and d_up (graph kept)
All memory-bound; bytes count what each op must read and write once.

    python bench/ops_norm_swiglu.py [--threads 2] [--dtypes fp32,bf16] [--quick]
"""
import numpy as np

import harness
from harness import Case

harness.require_peers("torch")  # before importing it: a missing torch is one line, not a traceback
import torch  # noqa: E402

df = harness.import_dataflow()


def hf_rms_norm(x, w, eps=1e-6):
    hidden_states = x.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return w * (hidden_states * torch.rsqrt(variance + eps)).to(x.dtype)


def _inputs(shape, count, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(count)]


def _torch(x, dtype):
    return harness.tensor(x).to(getattr(torch, harness.TORCH_DTYPES[dtype]))


def _rms_norm(h, dtype, tokens, hidden):
    x, _ = _inputs((tokens, hidden), 2, 0)
    w = (1 + 0.1 * np.random.default_rng(1).standard_normal(hidden)).astype(np.float32)
    a_x, a_w = h.from_numpy(x, dtype=dtype), h.from_numpy(w, dtype=dtype)
    a_y, a_rstd = h.empty(a_x.shape, dtype), h.empty((tokens,), "fp32")
    tx, tw = _torch(x, dtype), _torch(w, dtype)
    return Case("rms_norm", "fwd", dtype, f"{tokens}x{hidden}",
                harness.synced(h, lambda: df.ops.rms_norm(h, a_x, a_w, out=a_y, rstd=a_rstd)),
                lambda: hf_rms_norm(tx, tw), "LlamaRMSNorm.forward", bytes=2 * a_x.nbytes)


def _rms_norm_bwd(h, dtype, tokens, hidden):
    x, dy = _inputs((tokens, hidden), 2, 2)
    w = (1 + 0.1 * np.random.default_rng(3).standard_normal(hidden)).astype(np.float32)
    a_x, a_w, a_dy = (h.from_numpy(v, dtype=dtype) for v in (x, w, dy))
    a_y, a_dx, a_dw = h.empty(a_x.shape, dtype), h.empty(a_x.shape, dtype), h.empty((hidden,), dtype)
    a_rstd = h.empty((tokens,), "fp32")
    a_ws = h.empty((df.ops.rms_norm_bwd_w_workspace_bytes(tokens, hidden) // 4,), "fp32")
    df.ops.rms_norm(h, a_x, a_w, out=a_y, rstd=a_rstd)
    txg, twg = _torch(x, dtype).requires_grad_(), _torch(w, dtype).requires_grad_()
    ty, tdy = hf_rms_norm(txg, twg), _torch(dy, dtype)

    def ours():
        df.ops.rms_norm_bwd_x(h, a_dy, a_x, a_w, a_rstd, dx=a_dx)
        df.ops.rms_norm_bwd_w(h, a_dy, a_x, a_rstd, dw=a_dw, workspace=a_ws)
    return Case("rms_norm", "bwd", dtype, f"{tokens}x{hidden}", harness.synced(h, ours),
                lambda: torch.autograd.grad(ty, (txg, twg), tdy, retain_graph=True),
                "autograd of LlamaRMSNorm (dx, dw)", bytes=5 * a_x.nbytes)


def _swiglu(h, dtype, tokens, ffn):
    g, u = _inputs((tokens, ffn), 2, 4)
    a_g, a_u = h.from_numpy(g, dtype=dtype), h.from_numpy(u, dtype=dtype)
    a_out = h.empty(a_g.shape, dtype)
    tg, tu = _torch(g, dtype), _torch(u, dtype)
    return Case("swiglu", "fwd", dtype, f"{tokens}x{ffn}",
                harness.synced(h, lambda: df.ops.swiglu(h, a_g, a_u, out=a_out)),
                lambda: torch.nn.functional.silu(tg) * tu, "F.silu(gate) * up", bytes=3 * a_g.nbytes)


def _swiglu_bwd(h, dtype, tokens, ffn):
    g, u, dout = _inputs((tokens, ffn), 3, 5)
    a_g, a_u, a_dout = (h.from_numpy(v, dtype=dtype) for v in (g, u, dout))
    a_dg, a_du = h.empty(a_g.shape, dtype), h.empty(a_g.shape, dtype)
    tgg, tug = _torch(g, dtype).requires_grad_(), _torch(u, dtype).requires_grad_()
    tout, tdout = torch.nn.functional.silu(tgg) * tug, _torch(dout, dtype)
    return Case("swiglu", "bwd", dtype, f"{tokens}x{ffn}",
                harness.synced(h, lambda: df.ops.swiglu_bwd(h, a_dout, a_g, a_u, d_gate=a_dg, d_up=a_du)),
                lambda: torch.autograd.grad(tout, (tgg, tug), tdout, retain_graph=True),
                "autograd of F.silu(gate) * up", bytes=5 * a_g.nbytes)


def cases(h, args):
    tokens, hidden, ffn = (256, 512, 1408) if args.quick else (4 * 512 * args.scale, 2048, 5632)
    for dtype in args.dtypes:
        yield _rms_norm(h, dtype, tokens, hidden)
        yield _rms_norm_bwd(h, dtype, tokens, hidden)
        yield _swiglu(h, dtype, tokens, ffn)
        yield _swiglu_bwd(h, dtype, tokens, ffn)


if __name__ == "__main__":
    harness.main({"norm_swiglu": cases})
