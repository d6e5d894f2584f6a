"""add, cast and set_mem vs PyTorch CPU, on a 16M-element buffer (--quick: 1M): the size of a
gradient or master-weight buffer, where these ops run (gradient accumulation, the fp32 master
to bf16 cast, zeroing gradients), far larger than the last-level cache.

Peers write into preallocated outputs, as dataflow does: torch.add(a, b, out=c),
y.copy_(x) across dtypes, x.zero_(). All memory-bound; bytes count what is read and written.
cast runs for each ordered pair of the dtypes asked for (none with a single dtype).

    python bench/ops_elementwise.py [--threads 2] [--dtypes fp32,bf16] [--quick]
"""
import itertools

import numpy as np

import harness
from harness import Case

harness.require_peers("torch")  # before importing it: a missing torch is one line, not a traceback
import torch  # noqa: E402

df = harness.import_dataflow()


def _host(n, count):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(n, dtype=np.float32) for _ in range(count)]


def _torch(x, dtype):
    return harness.tensor(x).to(getattr(torch, harness.TORCH_DTYPES[dtype]))


def _add(h, n, dtype):
    x, y = _host(n, 2)
    a, b, out = h.from_numpy(x, dtype=dtype), h.from_numpy(y, dtype=dtype), h.empty(n, dtype)
    ta, tb = _torch(x, dtype), _torch(y, dtype)
    tc = torch.empty_like(ta)
    return Case("add", "fwd", dtype, str(n), harness.synced(h, lambda: df.ops.add(h, a, b, out=out)),
                lambda: torch.add(ta, tb, out=tc), "torch.add(a, b, out=c)", bytes=3 * out.nbytes)


def _cast(h, n, src, dst):
    (x,) = _host(n, 1)
    a, out = h.from_numpy(x, dtype=src), h.empty(n, dst)
    ta, tout = _torch(x, src), _torch(x, dst)
    return Case("cast", "fwd", f"{src}->{dst}", str(n), harness.synced(h, lambda: df.ops.cast(h, a, dst, out=out)),
                lambda: tout.copy_(ta), "out.copy_(x)", bytes=a.nbytes + out.nbytes)


def _set_mem(h, n, dtype):
    a, ta = h.empty(n, dtype), _torch(np.ones(n, np.float32), dtype)
    return Case("set_mem", "fwd", dtype, str(n), harness.synced(h, lambda: df.ops.set_mem(h, a, 0.0)), ta.zero_,
                "x.zero_()", bytes=a.nbytes)


def cases(h, args):
    n = 1 << 20 if args.quick else (1 << 24) * args.scale
    for dtype in args.dtypes:
        yield _add(h, n, dtype)
    for src, dst in itertools.permutations(args.dtypes, 2):
        yield _cast(h, n, src, dst)
    for dtype in args.dtypes:
        yield _set_mem(h, n, dtype)


if __name__ == "__main__":
    harness.main({"elementwise": cases})
