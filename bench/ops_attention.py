"""Host attention forward and backward vs torch scaled_dot_product_attention, same run.

    python bench/ops_attention.py [--threads 2] [--seqs 4] [--seq-len 512] [--q-heads 8]
                                  [--kv-heads 4] [--head-dim 64] [--dtypes fp32,bf16]

torch: per sequence, SDPA with is_causal=True on K/V expanded to the query heads
(repeat_interleave, as Hugging Face's repeat_kv), forward alone and forward + backward via
autograd; torch.set_num_threads(threads). dataflow: attention, and attention + attention_bwd,
on a Handle(threads=threads), each call including h.sync(). Times are medians of repeats
after a warm-up. GFLOP/s counts the causal matmul work: forward 4 * n^2/2 * d per head and
sequence (QK^T and PV), backward 2.5x that (dV, dP, dS->dQ, dS->dK), as FlashAttention reports.
Prints one JSON object, then a summary line with the speed ratios (torch time / dataflow time).
"""
import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
SECONDS_PER_MEASUREMENT = 2.0


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seqs", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--q-heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtypes", default="fp32,bf16")
    return p.parse_args()


def timed_median(fn):
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(max(5, min(50, int(SECONDS_PER_MEASUREMENT / max(first, 1e-6))))):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    args = parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch
    import dataflow as df

    torch.set_num_threads(args.threads)
    n, s, hq, hkv, d = args.seq_len, args.seqs, args.q_heads, args.kv_heads, args.head_dim
    total, group = n * s, hq // hkv
    cu = np.arange(0, total + 1, n, dtype=np.int32)
    fwd_flops = 4 * (n * (n + 1) / 2) * d * hq * s
    rng = np.random.default_rng(0)
    host = [rng.standard_normal((total, heads, d)).astype(np.float32) for heads in (hq, hkv, hkv, hq)]
    rows = []
    with df.Handle("host", threads=args.threads) as h:
        cu_dev = h.from_numpy(cu)
        for dtype in args.dtypes.split(","):
            tdt = getattr(torch, TORCH_DTYPES[dtype])
            tq, tk, tv, tdo = (torch.from_numpy(x).to(tdt) for x in host)

            def torch_fwd(backward=False):
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
            out, lse = df.ops.attention(h, q, k, v, cu_dev)
            dq, dk, dv = (h.empty(x.shape, dtype) for x in (q, k, v))
            ws = h.empty((df.ops.opslib.dataflow_attention_bwd_workspace_bytes(total, s, hq, hkv, d),), "uint8")

            def df_fwd():
                df.ops.attention(h, q, k, v, cu_dev, out=out, lse=lse)
                h.sync()

            def df_fwd_bwd():
                df.ops.attention(h, q, k, v, cu_dev, out=out, lse=lse)
                df.ops.attention_bwd(h, dout, q, k, v, out, lse, cu_dev, dq=dq, dk=dk, dv=dv, workspace=ws)
                h.sync()

            t = {"torch_fwd": timed_median(torch_fwd), "dataflow_fwd": timed_median(df_fwd),
                 "torch_fwd_bwd": timed_median(lambda: torch_fwd(True)), "dataflow_fwd_bwd": timed_median(df_fwd_bwd)}
            rows.append(dict(dtype=dtype, seconds=t,
                             gflops={k_: (fwd_flops * (1 if k_.endswith("_fwd") else 3.5)) / v_ / 1e9
                                     for k_, v_ in t.items()},
                             speedup_fwd=t["torch_fwd"] / t["dataflow_fwd"],
                             speedup_fwd_bwd=t["torch_fwd_bwd"] / t["dataflow_fwd_bwd"]))
    result = dict(shape=dict(seqs=s, seq_len=n, q_heads=hq, kv_heads=hkv, head_dim=d, causal=True),
                  threads=args.threads, torch=torch.__version__, machine=platform.processor() or platform.machine(),
                  rows=rows)
    print(json.dumps(result, indent=1))
    print("attention vs torch SDPA (x faster, >1 is better): " + ", ".join(
        f"{r['dtype']} fwd {r['speedup_fwd']:.2f}x fwd+bwd {r['speedup_fwd_bwd']:.2f}x" for r in rows))


if __name__ == "__main__":
    main()
