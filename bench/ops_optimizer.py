"""adamw_step and grad_norm_sq on the host backend vs PyTorch CPU in the same run, same
thread count. Prints JSON and a one-line summary. Ratios are torch_time / dataflow_time
(> 1: dataflow faster). Bandwidth fraction = bytes moved per step / time, over numpy
memcpy bandwidth measured in the same run (torch copy_ of an n x fp32 buffer, same threads)."""
import argparse
import json
import time

import numpy as np
import torch

import dataflow as df


def best(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=25_000_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    n, T = args.n, args.threads
    torch.set_num_threads(T)
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal(n).astype(np.float32)
    g0 = (rng.standard_normal(n) * 0.01).astype(np.float32)
    res = {"n": n, "threads": T}

    src, dst = torch.ones(n), torch.empty(n)
    t = best(lambda: dst.copy_(src), args.reps)
    res["memcpy_GBps"] = 2 * n * 4 / t / 1e9  # read + write

    with df.Handle("host", threads=T, device_memory=f"{n * 40 + (1 << 26)}B") as h:
        # ---- adamw fp32 ----
        p, g = h.from_numpy(p0), h.from_numpy(g0)
        m, v = h.zeros(n), h.zeros(n)
        step = [0]

        def ours():
            step[0] += 1
            df.ops.adamw_step(h, p, g, m, v, step[0])
            h.sync()
        tp = torch.nn.Parameter(torch.from_numpy(p0.copy()))
        tp.grad = torch.from_numpy(g0.copy())
        opt = torch.optim.AdamW([tp], lr=1e-3, weight_decay=1e-2)
        ours_t, torch_t = best(ours, args.reps), best(opt.step, args.reps)
        bytes_fp32 = n * 4 * (2 + 1 + 2 + 2)  # p rw, g r, m rw, v rw
        res["adamw_fp32"] = dict(dataflow_ms=ours_t * 1e3, torch_ms=torch_t * 1e3, ratio=torch_t / ours_t,
                                 GBps=bytes_fp32 / ours_t / 1e9, bw_frac=bytes_fp32 / ours_t / 1e9 / res["memcpy_GBps"])
        tf = torch.nn.Parameter(torch.from_numpy(p0.copy()))
        tf.grad = tp.grad
        optf = torch.optim.AdamW([tf], lr=1e-3, weight_decay=1e-2, fused=True)
        res["adamw_fp32"]["torch_fused_ms"] = best(optf.step, args.reps) * 1e3
        res["adamw_fp32"]["ratio_vs_fused"] = res["adamw_fp32"]["torch_fused_ms"] / 1e3 / ours_t
        del p, m, v, tp, opt, tf, optf

        # ---- adamw bf16 param + bf16 grad + fp32 master (torch: fp32 AdamW + copy to bf16) ----
        pb, gb, master = h.from_numpy(p0, dtype="bf16"), h.from_numpy(g0, dtype="bf16"), h.from_numpy(p0)
        m, v = h.zeros(n), h.zeros(n)

        def ours_bf16():
            step[0] += 1
            df.ops.adamw_step(h, pb, gb, m, v, step[0], master=master)
            h.sync()
        tp = torch.nn.Parameter(torch.from_numpy(p0.copy()))
        tgb = torch.from_numpy(g0.copy()).bfloat16()
        tpb = tp.detach().bfloat16()
        opt = torch.optim.AdamW([tp], lr=1e-3, weight_decay=1e-2)

        def torch_bf16():
            tp.grad = tgb.float()
            opt.step()
            tpb.copy_(tp.detach())
        ours_t, torch_t = best(ours_bf16, args.reps), best(torch_bf16, args.reps)
        bytes_bf16 = n * (2 + 2 + 4 * 2 + 4 * 2 + 4 * 2)  # param w, grad r, master rw, m rw, v rw
        res["adamw_bf16_master"] = dict(dataflow_ms=ours_t * 1e3, torch_ms=torch_t * 1e3, ratio=torch_t / ours_t,
                                        GBps=bytes_bf16 / ours_t / 1e9,
                                        bw_frac=bytes_bf16 / ours_t / 1e9 / res["memcpy_GBps"])
        del pb, master, m, v, tp, opt

        # ---- grad_norm_sq fp32 ----
        out = h.empty(1)
        ws = h.empty(df.ops.grad_norm_sq_workspace_bytes(n) // 8, "fp64")

        def ours_norm():
            df.ops.grad_norm_sq(h, g, out=out, workspace=ws)
            h.sync()
        tg = torch.from_numpy(g0.copy())
        ours_t = best(ours_norm, args.reps)
        torch_t = best(lambda: torch.linalg.vector_norm(tg).item(), args.reps)
        res["grad_norm_sq_fp32"] = dict(dataflow_ms=ours_t * 1e3, torch_ms=torch_t * 1e3, ratio=torch_t / ours_t,
                                        GBps=n * 4 / ours_t / 1e9)
    print(json.dumps(res, indent=1))
    print(f"n={n} threads={T} memcpy={res['memcpy_GBps']:.1f}GB/s | adamw fp32 {res['adamw_fp32']['ratio']:.2f}x torch "
          f"({res['adamw_fp32']['ratio_vs_fused']:.2f}x fused=True, {res['adamw_fp32']['bw_frac']:.2f} of memcpy) | adamw bf16+master {res['adamw_bf16_master']['ratio']:.2f}x "
          f"torch ({res['adamw_bf16_master']['bw_frac']:.2f} of memcpy) | grad_norm_sq {res['grad_norm_sq_fp32']['ratio']:.2f}x "
          f"torch vector_norm")


if __name__ == "__main__":
    main()
