"""rms_norm / rms_norm backward / swiglu / swiglu backward on the host backend vs PyTorch CPU
eager, same shapes, dtype and thread count (2), in the same run. Prints JSON, then one summary
line.

    python bench/ops_norm_swiglu.py

Shapes (a TinyLlama-sized layer): 4 x 512 tokens, hidden 2048, ffn 5632. Peers:
  rms_norm      Hugging Face LlamaRMSNorm.forward (fp32 math, weight * normed.to(dtype))
  rms_norm_bwd  autograd of that module for dx and dw (graph kept); ours: bwd_x then bwd_w
                (partials + reduce over a preallocated workspace)
  swiglu        F.silu(gate) * up
  swiglu_bwd    autograd of F.silu(gate) * up for d_gate and d_up (graph kept)
Ratio = torch time / dataflow time (> 1: dataflow faster). Medians of calls taken in blocks
that alternate between the two (bench/matmul.py's timed_medians: torch's OpenMP workers spin
after each call and would slow a call of ours made right after), h.sync() included. GB/s for ours: bytes each op must read and write once, over its time; with
the memcpy bandwidth of the same run for scale.
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import dataflow as df  # noqa: E402
from matmul import timed_medians  # noqa: E402  (blocks of calls, taking turns)

TOKENS, HIDDEN, FFN, THREADS = 4 * 512, 2048, 5632, 2
TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def hf_rms_norm(x, w, eps=1e-6):
    hidden_states = x.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return w * (hidden_states * torch.rsqrt(variance + eps)).to(x.dtype)


def main():
    torch.set_num_threads(THREADS)
    rng = np.random.default_rng(0)
    results = []
    with df.Handle("host", threads=THREADS, device_memory="2GiB") as h:
        def synced(fn):
            def run():
                fn()
                h.sync()
            return run

        for dtype in ("fp32", "bf16"):
            td, size = TORCH[dtype], 4 if dtype == "fp32" else 2
            x, dy = (rng.standard_normal((TOKENS, HIDDEN)).astype(np.float32) for _ in range(2))
            w = (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)
            g, u, dout = (rng.standard_normal((TOKENS, FFN)).astype(np.float32) for _ in range(3))
            a_x, a_w, a_dy = (h.from_numpy(v, dtype=dtype) for v in (x, w, dy))
            a_y, a_dx, a_dw = h.empty(a_x.shape, dtype), h.empty(a_x.shape, dtype), h.empty((HIDDEN,), dtype)
            a_rstd = h.empty((TOKENS,), "fp32")
            a_ws = h.empty((df.ops.rms_norm_bwd_w_workspace_bytes(TOKENS, HIDDEN) // 4,), "fp32")
            a_g, a_u, a_dout = (h.from_numpy(v, dtype=dtype) for v in (g, u, dout))
            a_out, a_dg, a_du = (h.empty(a_g.shape, dtype) for _ in range(3))
            df.ops.rms_norm(h, a_x, a_w, out=a_y, rstd=a_rstd)

            tx, tw, tdy = (torch.from_numpy(v).to(td) for v in (x, w, dy))
            tg, tu, tdout = (torch.from_numpy(v).to(td) for v in (g, u, dout))
            txg, twg = tx.clone().requires_grad_(), tw.clone().requires_grad_()
            ty = hf_rms_norm(txg, twg)
            tgg, tug = tg.clone().requires_grad_(), tu.clone().requires_grad_()
            tout = torch.nn.functional.silu(tgg) * tug

            def rms_bwd():
                df.ops.rms_norm_bwd_x(h, a_dy, a_x, a_w, a_rstd, dx=a_dx)
                df.ops.rms_norm_bwd_w(h, a_dy, a_x, a_rstd, dw=a_dw, workspace=a_ws)

            n_norm, n_ffn = TOKENS * HIDDEN * size, TOKENS * FFN * size
            cases = [  # name, ours, peer, bytes moved by ours
                ("rms_norm", synced(lambda: df.ops.rms_norm(h, a_x, a_w, out=a_y, rstd=a_rstd)),
                 lambda: hf_rms_norm(tx, tw), 2 * n_norm),
                ("rms_norm_bwd", synced(rms_bwd),
                 lambda: torch.autograd.grad(ty, (txg, twg), tdy, retain_graph=True), 5 * n_norm),
                ("swiglu", synced(lambda: df.ops.swiglu(h, a_g, a_u, out=a_out)),
                 lambda: torch.nn.functional.silu(tg) * tu, 3 * n_ffn),
                ("swiglu_bwd", synced(lambda: df.ops.swiglu_bwd(h, a_dout, a_g, a_u, d_gate=a_dg, d_up=a_du)),
                 lambda: torch.autograd.grad(tout, (tgg, tug), tdout, retain_graph=True), 5 * n_ffn),
            ]
            for name, ours, peer, nbytes in cases:
                t_ours, t_torch = timed_medians([ours, peer])
                results.append(dict(op=name, dtype=dtype, dataflow_ms=t_ours * 1e3, torch_ms=t_torch * 1e3,
                                    ratio=t_torch / t_ours, dataflow_gbs=nbytes / t_ours / 1e9))
        src = np.ones(TOKENS * FFN, np.float32)
        dst = np.empty_like(src)
        t_copy = timed_medians([lambda: np.copyto(dst, src)])[0]
        copy_gbs = 2 * src.nbytes / t_copy / 1e9
    print(json.dumps(dict(shapes=dict(tokens=TOKENS, hidden=HIDDEN, ffn=FFN), threads=THREADS,
                          torch=torch.__version__, memcpy_gbs=copy_gbs, results=results), indent=1))
    print("summary: " + ", ".join(f"{r['op']}[{r['dtype']}] {r['ratio']:.2f}x" for r in results)
          + f" (torch time / dataflow time, {THREADS} threads; memcpy {copy_gbs:.1f} GB/s)")


if __name__ == "__main__":
    main()
