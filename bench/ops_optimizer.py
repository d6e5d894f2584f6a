"""adamw_step and grad_norm_sq vs PyTorch CPU, on one 25M-element parameter (--quick: 1M).

Peers: adamw_step fp32 vs torch.optim.AdamW (default, then fused=True: row adamw_step_vs_fused);
adamw_step_bf16_state and adamw_step_8bit (fp32 param and grad) vs fused fp32 AdamW (torch has
no lean state on the CPU); bf16 param + bf16 grad + fp32 master vs fp32 AdamW on the master plus the copy to the bf16
param; grad_norm_sq (fp32) vs torch.linalg.vector_norm. All memory-bound: bytes count each
buffer read and written once per step. grad_norm_sq only reads, so it can pass 1.0 of memcpy
(which reads and writes).

    python bench/ops_optimizer.py [--threads 2] [--dtypes fp32,bf16] [--quick]
"""
import itertools

import numpy as np

import harness
from harness import Case

harness.require_peers("torch")  # before importing it: a missing torch is one line, not a traceback
import torch  # noqa: E402

df = harness.import_dataflow()


def _host(n):
    rng = np.random.default_rng(0)
    return rng.standard_normal(n).astype(np.float32), (rng.standard_normal(n) * 0.01).astype(np.float32)


def _adamw_fp32(h, n, fused):
    p0, g0 = _host(n)
    p, g, m, v = h.from_numpy(p0), h.from_numpy(g0), h.zeros(n), h.zeros(n)
    steps = itertools.count(1)
    tp = torch.nn.Parameter(harness.tensor(p0))
    tp.grad = harness.tensor(g0)
    opt = torch.optim.AdamW([tp], lr=1e-3, weight_decay=1e-2, fused=fused)
    return Case("adamw_step_vs_fused" if fused else "adamw_step", "fwd", "fp32", str(n),
                harness.synced(h, lambda: df.ops.adamw_step(h, p, g, m, v, next(steps))), opt.step,
                f"torch.optim.AdamW(fused={fused})", bytes=n * 4 * (2 + 1 + 2 + 2))  # p rw, g r, m rw, v rw


def _adamw_bf16_master(h, n):
    p0, g0 = _host(n)
    pb, gb, master = h.from_numpy(p0, dtype="bf16"), h.from_numpy(g0, dtype="bf16"), h.from_numpy(p0)
    m, v = h.zeros(n), h.zeros(n)
    steps = itertools.count(1)
    tp = torch.nn.Parameter(harness.tensor(p0.copy()))
    tgb, tpb = harness.tensor(g0).bfloat16(), tp.detach().bfloat16()
    opt = torch.optim.AdamW([tp], lr=1e-3, weight_decay=1e-2)

    def theirs():
        tp.grad = tgb.float()
        opt.step()
        tpb.copy_(tp.detach())

    return Case("adamw_step", "fwd", "bf16", f"{n} (+fp32 master)",
                harness.synced(h, lambda: df.ops.adamw_step(h, pb, gb, m, v, next(steps), master=master)), theirs,
                "fp32 torch.optim.AdamW on the master + copy_ to bf16",
                bytes=n * (2 + 2 + 4 * 2 + 4 * 2 + 4 * 2))  # param w, grad r, master rw, m rw, v rw


def _adamw_lean(h, n, state):
    """fp32 param and grad, m and v stored as `state` (bf16 or 8bit); the peer is torch's fused
    fp32-state AdamW (torch has no lean state on the CPU): the ratio is what the smaller state buys."""
    p0, g0 = _host(n)
    p, g = h.from_numpy(p0), h.from_numpy(g0)
    steps = itertools.count(1)
    tp = torch.nn.Parameter(harness.tensor(p0))
    tp.grad = harness.tensor(g0)
    opt = torch.optim.AdamW([tp], lr=1e-3, weight_decay=1e-2, fused=True)
    if state == "bf16":
        m, v = h.zeros((n,), "bf16"), h.zeros((n,), "bf16")
        ours = lambda: df.ops.adamw_step_bf16_state(h, p, g, m, v, next(steps), seed=1)  # noqa: E731
        state_bytes = 2 * 2 * 2  # m, v rw
    else:
        blocks = -(-n // df.ops.ADAMW_8BIT_BLOCK)
        m, v = h.zeros((n,), "uint8"), h.zeros((n,), "uint8")
        ma, va = h.zeros((blocks,)), h.zeros((blocks,))
        qm, qv = (h.from_numpy(df.ops.adamw_8bit_dynamic_code(s)) for s in (True, False))
        ours = lambda: df.ops.adamw_step_8bit(h, p, g, m, v, ma, va, qm, qv, next(steps))  # noqa: E731
        state_bytes = 2 * 2 * 1
    return Case(f"adamw_step_{'bf16_state' if state == 'bf16' else '8bit'}", "fwd", "fp32", str(n),
                harness.synced(h, ours), opt.step, "torch.optim.AdamW(fused=True), fp32 state",
                bytes=n * (4 * (2 + 1) + state_bytes))  # p rw, g r, m and v rw


def _grad_norm_sq(h, n):
    _, g0 = _host(n)
    g, out = h.from_numpy(g0), h.empty(1)
    ws = h.empty(df.ops.grad_norm_sq_workspace_bytes(n) // 8, "fp64")
    tg = harness.tensor(g0)
    return Case("grad_norm_sq", "fwd", "fp32", str(n),
                harness.synced(h, lambda: df.ops.grad_norm_sq(h, g, out=out, workspace=ws)),
                lambda: torch.linalg.vector_norm(tg).item(), "torch.linalg.vector_norm(g).item()", bytes=n * 4)


def cases(h, args):
    n = 1_000_000 if args.quick else 25_000_000 * min(args.scale, 4)
    if "fp32" in args.dtypes:
        yield _adamw_fp32(h, n, fused=False)
        yield _adamw_fp32(h, n, fused=True)
        yield _adamw_lean(h, n, "bf16")
        yield _adamw_lean(h, n, "8bit")
    if "bf16" in args.dtypes:
        yield _adamw_bf16_master(h, n)
    if "fp32" in args.dtypes:
        yield _grad_norm_sq(h, n)


if __name__ == "__main__":
    harness.main({"optimizer": cases})
