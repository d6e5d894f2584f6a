"""The matmul oracle (numpy in float64 of exactly representable inputs) and its comparison,
shared by the matmul tests."""
import ml_dtypes
import numpy as np
import dataflow as df
from tolerances import matmul_tolerance


NUMPY_OF = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}


def exact(rng, shape, dtype):
    """Uniform [-1, 1) values exactly representable in dtype, as float64."""
    return rng.uniform(-1, 1, shape).astype(NUMPY_OF[dtype]).astype(np.float64)


def run_case(h, in_dtype, out_dtype, m, n, k, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, c_mode="none",
             stream=0):
    """Submits one matmul; returns (device out array, float64 oracle). c_mode: "none" (C
    NULL; out starts as NaN, which must not leak in), "separate" or "inplace" (C is out)."""
    rng = np.random.default_rng([m, n, k, trans_a, trans_b, len(in_dtype), len(out_dtype)])
    a = exact(rng, (k, m) if trans_a else (m, k), in_dtype)
    b = exact(rng, (n, k) if trans_b else (k, n), in_dtype)
    c = exact(rng, (m, n), out_dtype)
    want = alpha * ((a.T if trans_a else a) @ (b.T if trans_b else b))
    da, db = h.from_numpy(a.astype(np.float32), dtype=in_dtype), h.from_numpy(b.astype(np.float32), dtype=in_dtype)
    out = h.from_numpy(np.full((m, n), np.nan if c_mode == "none" else 0, np.float32), dtype=out_dtype)
    dc = None
    if c_mode == "separate":
        dc = h.from_numpy(c.astype(np.float32), dtype=out_dtype)
    elif c_mode == "inplace":
        out.copy_from_numpy(c.astype(np.float32))
        dc = out
    if dc is not None:
        want = want + beta * c
    df.ops.matmul(h, da, db, out=out, c=dc, transpose_a=trans_a, transpose_b=trans_b, alpha=alpha, beta=beta,
                  out_dtype=out_dtype, stream=stream)
    return out, want


def check(out, want, out_dtype, k):
    h = out.handle
    h.sync()
    got = out.numpy().astype(np.float64)
    np.testing.assert_allclose(got, want, **matmul_tolerance(out_dtype, k))


def rows_alone_and_together(h, dtype, n, k):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, k), np.float32), rng.standard_normal((n, k), np.float32)
    db = h.from_numpy(b, dtype=dtype)
    results = []
    for m in (1, 2, 3, 4):
        out = h.empty((m, n), dtype="fp32")
        df.ops.matmul(h, h.from_numpy(a[:m], dtype=dtype), db, out=out, transpose_b=True)
        results.append(out.numpy())
    return results
