"""Fused softmax cross-entropy (forward + backward) on the host backend vs PyTorch CPU.

Same run, same machine, same dtype, 2 threads each: dataflow's cross_entropy (loss and
dlogits in one op, scale = 1/tokens, labels already on the device) against
F.cross_entropy(reduction="mean") + backward() on a leaf tensor. The op is memory-bound:
it must read the logits and write dlogits, the traffic of one memcpy of the logits, so
`of_memcpy` = memcpy time / op time (1.0 = at memcpy bandwidth; it also reads each row
a second time, from cache for rows under ~1 MiB).
Usage: python bench/ops_cross_entropy.py [--reps N]. Prints JSON, then one summary line."""
import argparse
import json
import time

import numpy as np
import torch
import torch.nn.functional as F

import dataflow as df

TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16}


def best_time(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), float(min(times))


def bench(h, tokens, vocab, dtype, reps):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((tokens, vocab), dtype=np.float32) * 3)
    y = rng.integers(0, vocab, tokens).astype(np.int32)
    logits, labels = h.from_numpy(x, dtype=dtype), h.from_numpy(y)
    dlogits = h.empty((tokens, vocab), dtype)

    def ours():
        df.ops.cross_entropy(h, logits, labels, scale=1.0 / tokens, dlogits=dlogits)
        h.sync()

    tx = torch.from_numpy(x).to(TORCH[dtype]).requires_grad_()
    ty = torch.from_numpy(y).long()

    def theirs():
        tx.grad = None
        F.cross_entropy(tx, ty).backward()

    src = np.empty(x.size * (4 if dtype == "fp32" else 2), np.uint8)
    src[:] = 1
    dst = np.empty_like(src)
    tsrc, tdst = torch.from_numpy(src), torch.from_numpy(dst)

    def memcpy():
        tdst.copy_(tsrc)  # torch's copy runs on the 2 threads, numpy's on one

    t_ours, t_ours_min = best_time(ours, reps)
    t_torch, t_torch_min = best_time(theirs, reps)
    t_copy, _ = best_time(memcpy, reps)
    return dict(tokens=tokens, vocab=vocab, dtype=dtype, dataflow_ms=t_ours * 1e3, torch_ms=t_torch * 1e3,
                dataflow_min_ms=t_ours_min * 1e3, torch_min_ms=t_torch_min * 1e3, memcpy_ms=t_copy * 1e3,
                speedup_vs_torch=t_torch / t_ours, of_memcpy=t_copy / t_ours,
                memcpy_gbs=2 * src.nbytes / t_copy / 1e9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(2)
    results = []
    with df.Handle("host", streams=1, threads=2, device_memory="6GiB") as h:
        for vocab in (8192, 128256):
            for dtype in ("fp32", "bf16"):
                results.append(bench(h, 4 * 512, vocab, dtype, args.reps))
    print(json.dumps(results, indent=1))
    print("cross_entropy fwd+bwd vs torch (2 threads): " + ", ".join(
        f"{r['dtype']} V={r['vocab']} {r['speedup_vs_torch']:.2f}x ({r['of_memcpy']:.2f} of memcpy)" for r in results))


if __name__ == "__main__":
    main()
