"""Weight-only int8/int4 dequantize-matmul (qmatmul_int8, qmatmul_int4) against a float64 numpy
oracle, and the round-to-nearest quantizer (dataflow.quantize) that makes their weights.

The oracle dequantizes from the packed bytes with its own code (not dataflow.quantize's), from
the contract: w = (code - zero) * scale per group. Inputs are rounded to their dtype first, so
the oracle sees what the kernel sees; matmul_tolerance covers the fp32 accumulation and the
final rounding. A row's bits must not depend on M (decode path for M <= 4, prefill above)."""
import ml_dtypes
import numpy as np
import pytest

import dataflow as df
from dataflow import catalogue, ops, quantize
from conftest import handle_fixture
from dataflow.errors import BadArgumentError
from tolerances import matmul_tolerance

QOPS = ["qmatmul_int8", "qmatmul_int4"]
qh = handle_fixture("qh", ops=QOPS, streams=2, device_memory="256MiB")  # host, then vulkan and cuda where usable

# (M, N, K): M = 1, 3 (decode), 64 (prefill); N odd; K not a multiple of 16 or of the group, and odd
SHAPES = [(1, 37, 100), (3, 37, 100), (64, 37, 100), (1, 33, 201), (3, 65, 257), (64, 33, 201), (5, 16, 32)]
DTYPES = [("fp32", "fp32", "fp32"), ("bf16", "fp32", "bf16"), ("bf16", "bf16", "fp32"), ("fp32", "bf16", "bf16")]


def rounded(values, dtype):
    return values.astype(ml_dtypes.bfloat16).astype(np.float64) if dtype == "bf16" else values.astype(np.float32)


def oracle_weights(bits, packed, scales, k, group_size, zeros):
    """fp64 [N, k] from the contract, written independently of dataflow.quantize"""
    n = packed.shape[0]
    if bits == 8:
        return packed.astype(np.float64) * scales.astype(np.float64)[:, None]
    codes = np.zeros((n, k), np.float64)
    for j in range(k):
        byte = packed[:, j // 2].astype(np.int64)
        codes[:, j] = (byte >> 4) if j % 2 else (byte & 15)
    g = np.arange(k) // group_size
    z = 8.0 if zeros is None else zeros[:, g].astype(np.float64)
    return (codes - z) * scales.astype(np.float64)[:, g]


def run(h, bits, m, n, k, x_dtype, scale_dtype, out_dtype, group_size=32, zero_point=False, c_mode="none", seed=0):
    """(device out, float64 oracle) of one qmatmul"""
    rng = np.random.default_rng([bits, m, n, k, group_size, zero_point, seed])
    x = rounded(rng.uniform(-1, 1, (m, k)), x_dtype)
    w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    zeros = None
    if bits == 8:
        q, scales = quantize.quantize_int8(w)
    else:
        q, scales, zeros = quantize.quantize_int4(w, group_size, zero_point=zero_point)
    scales = rounded(scales, scale_dtype)
    want = x.astype(np.float64) @ oracle_weights(bits, q, scales, k, group_size, zeros).T
    dx, dq, ds = h.from_numpy(x, dtype=x_dtype), h.from_numpy(q), h.from_numpy(scales, dtype=scale_dtype)
    out = h.from_numpy(np.full((m, n), np.nan if c_mode == "none" else 0, np.float32), dtype=out_dtype)
    c = None
    if c_mode != "none":
        cv = rounded(rng.uniform(-1, 1, (m, n)), out_dtype)
        want = want + cv
        c = out if c_mode == "inplace" else h.from_numpy(cv, dtype=out_dtype)
        c.copy_from_numpy(cv)
    if bits == 8:
        ops.qmatmul_int8(h, dx, dq, ds, out=out, c=c)
    else:
        dz = h.from_numpy(zeros) if zeros is not None else None
        ops.qmatmul_int4(h, dx, dq, ds, group_size, zeros=dz, out=out, c=c)
    return out, want


@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
@pytest.mark.parametrize("x_dtype,scale_dtype,out_dtype", DTYPES, ids="-".join)
def test_int8_matches_numpy(qh, m, n, k, x_dtype, scale_dtype, out_dtype):
    out, want = run(qh, 8, m, n, k, x_dtype, scale_dtype, out_dtype)
    np.testing.assert_allclose(out.numpy().astype(np.float64), want, **matmul_tolerance(out_dtype, k))


@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
@pytest.mark.parametrize("group_size,zero_point", [(32, False), (64, True), (128, False), (96, True)])
@pytest.mark.parametrize("x_dtype,scale_dtype,out_dtype", DTYPES[:2], ids="-".join)
def test_int4_matches_numpy(qh, m, n, k, group_size, zero_point, x_dtype, scale_dtype, out_dtype):
    out, want = run(qh, 4, m, n, k, x_dtype, scale_dtype, out_dtype, group_size, zero_point)
    np.testing.assert_allclose(out.numpy().astype(np.float64), want, **matmul_tolerance(out_dtype, k))


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("c_mode", ["separate", "inplace"])
@pytest.mark.parametrize("m", [1, 64])
def test_residual_c_is_added_and_may_be_out(qh, bits, c_mode, m):
    out, want = run(qh, bits, m, 37, 100, "fp32", "fp32", "fp32", c_mode=c_mode)
    np.testing.assert_allclose(out.numpy().astype(np.float64), want, **matmul_tolerance("fp32", 100))


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("x_dtype", ["fp32", "bf16"])
def test_a_row_does_not_depend_on_the_batch(h, bits, x_dtype):
    """Decode (M <= 4) and prefill (tiles) paths give every row the same bits."""
    m, n, k = 64, 37, 201
    rng = np.random.default_rng(7)
    x = h.from_numpy(rng.uniform(-1, 1, (m, k)).astype(np.float32), dtype=x_dtype)
    w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    if bits == 8:
        q, s = quantize.quantize_int8(w)
        run_op = lambda xs: ops.qmatmul_int8(h, xs, dq, ds)  # noqa: E731
    else:
        q, s, z = quantize.quantize_int4(w, 64, zero_point=True)
        dz = h.from_numpy(z)
        run_op = lambda xs: ops.qmatmul_int4(h, xs, dq, ds, 64, zeros=dz)  # noqa: E731
    dq, ds = h.from_numpy(q), h.from_numpy(s)
    full = run_op(x).numpy()
    xv = x.numpy()
    for rows in ([5], [0, 1, 2], [10, 11, 12, 13, 14, 15, 16]):
        part = run_op(h.from_numpy(xv[rows], dtype=x_dtype)).numpy()
        assert part.tobytes() == full[rows].tobytes(), rows


@pytest.mark.parametrize("bits,group_size,zero_point", [(8, 32, False), (4, 64, True), (4, 32, False)])
@pytest.mark.parametrize("x_dtype,scale_dtype,out_dtype", DTYPES, ids="-".join)
def test_other_backends_follow_the_host(qh, h, bits, group_size, zero_point, x_dtype, scale_dtype, out_dtype):
    """Every backend does the host's operations in the host's order (the dequantized weight, an fma
    per lane, the pairwise sum): cuda's fmaf gives the host's bits; lavapipe's GLSL fma is a product
    and a sum (llvmpipe does not fuse it), so vulkan is within a few fp32 ulps of them."""
    if qh.backend == "host":
        pytest.skip("the host is the reference")
    for m, n, k in ((1, 37, 201), (5, 33, 64), (64, 16, 100)):
        got = run(qh, bits, m, n, k, x_dtype, scale_dtype, out_dtype, group_size, zero_point, c_mode="separate")[0]
        want = run(h, bits, m, n, k, x_dtype, scale_dtype, out_dtype, group_size, zero_point, c_mode="separate")[0]
        if qh.backend.startswith("cuda"):
            assert got.numpy().tobytes() == want.numpy().tobytes(), (m, n, k)
        else:
            ulps = 16 * np.finfo(np.float32).eps * np.sqrt(k) if out_dtype == "fp32" else 2.0 ** -7
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=ulps, atol=ulps, err_msg=str((m, n, k)))


def _run_all(h, m=67, n=37, k=201):
    """outputs of both ops on both paths, for the thread-count and SIMD-level comparisons"""
    for bits in (8, 4):
        for rows in (m, 3):
            yield run(h, bits, rows, n, k, "bf16", "fp32", "fp32", group_size=64, zero_point=True)[0].numpy()


# ---- the quantizer ----

def test_quantize_int8_round_to_nearest():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((9, 77)).astype(np.float32)
    w[3] = 0
    q, s = quantize.quantize_int8(w)
    assert q.dtype == np.int8 and s.dtype == np.float32 and q.shape == w.shape and s.shape == (9,)
    np.testing.assert_array_equal(s, np.abs(w).max(axis=1) / np.float32(127))
    safe = np.where(s == 0, 1, s)[:, None]
    np.testing.assert_array_equal(q, np.clip(np.rint(w / safe), -127, 127))  # the nearest code, ties to even
    assert (np.abs(q).max(axis=1)[[0, 1, 2, 4]] == 127).all() and (q[3] == 0).all() and s[3] == 0
    err = np.abs(quantize.dequantize_int8(q, s) - w)
    assert (err <= s[:, None] / 2 * (1 + 1e-6)).all()


@pytest.mark.parametrize("zero_point", [False, True])
@pytest.mark.parametrize("k,group_size", [(77, 32), (128, 128), (200, 96)])
def test_quantize_int4_round_to_nearest(k, group_size, zero_point):
    rng = np.random.default_rng(k)
    w = rng.standard_normal((5, k)).astype(np.float32) + (0.5 if zero_point else 0)
    packed, s, z = quantize.quantize_int4(w, group_size, zero_point=zero_point)
    groups = -(-k // group_size)
    assert packed.shape == (5, -(-k // 2)) and s.shape == (5, groups) and (z is None) != zero_point
    codes = quantize.unpack_int4(packed, k)
    np.testing.assert_array_equal(quantize.pack_int4(codes), packed)
    g = np.arange(k) // group_size
    zz = 8 if z is None else z[:, g].astype(np.float32)
    want = np.clip(np.rint(w / s[:, g]) + zz, 0, 15)  # the nearest code in range
    np.testing.assert_array_equal(codes, want)
    err = np.abs(quantize.dequantize_int4(packed, s, k, group_size, z) - w)
    assert (err <= s[:, g] / 2 * (1 + 1e-5)).all()


# ---- bad input ----

@pytest.mark.parametrize("group_size", [0, 16, 48, 256, 33])
def test_bad_group_size_is_refused_in_c_and_python(h, group_size):
    x, w, s = h.empty((1, 64)), h.empty((3, 32), "uint8"), h.empty((3, 4))
    with pytest.raises(BadArgumentError, match="group_size"):
        ops.qmatmul_int4(h, x, w, s, group_size)
    with pytest.raises(df.DataflowError, match="qmatmul_int4.*group_size"):  # straight to C: its signature
        catalogue.OPS["qmatmul_int4"].submit(h, 0, x_dtype="fp32", scale_dtype="fp32", out_dtype="fp32", M=1, N=3, K=64,
                                             group_size=group_size, x=x, W=w, scales=s, zeros=None, C=None,
                                             out=h.empty((1, 3)))
    with pytest.raises(BadArgumentError, match="group_size"):
        quantize.quantize_int4(np.ones((2, 64), np.float32), group_size)


def test_bad_shapes_and_dtypes_name_the_argument(h):
    x, q, s = h.empty((2, 64)), h.empty((5, 64), "int8"), h.empty(5)
    cases = [
        (lambda: ops.qmatmul_int8(h, h.empty((2, 63)), q, s),
         r"qmatmul_int8: w must have shape \[N, K\] with K = 63 \(from x\)"),
        (lambda: ops.qmatmul_int8(h, x, h.empty((5, 64), "uint8"), s), "qmatmul_int8: w must be int8, got uint8"),
        (lambda: ops.qmatmul_int8(h, h.empty((2, 64), "fp16"), q, s),
         r"qmatmul_int8: x dtype must be one of \{fp32, bf16\}, got fp16"),
        (lambda: ops.qmatmul_int8(h, x, q, h.empty(4)), r"scales must have shape \[N\] with N = 5"),
        (lambda: ops.qmatmul_int8(h, x, q, s, out=h.empty((2, 4))), r"out must have shape \[M, N\] with N = 5"),
        (lambda: ops.qmatmul_int8(h, x, q, s, out_dtype="fp16"), r"out_dtype must be one of \{fp32, bf16\}, got fp16"),
        (lambda: ops.qmatmul_int4(h, x, h.empty((5, 31), "uint8"), h.empty((5, 2)), 32), "cdiv"),
        (lambda: ops.qmatmul_int4(h, x, h.empty((5, 32), "uint8"), h.empty((5, 1)), 32), "scales must have shape"),
        (lambda: ops.qmatmul_int4(h, x, h.empty((5, 32), "uint8"), h.empty((5, 2)), 32, zeros=h.empty((5, 2))),
         "zeros must be uint8"),
    ]
    for call, message in cases:
        with pytest.raises(BadArgumentError, match=message):
            call()


def test_c_checks_the_extents(h):
    """A W too short for N * K reaches C's signature check, which names it."""
    x, q, s = h.empty((1, 64)), h.empty((4, 64), "int8"), h.empty(5)
    with pytest.raises(df.DataflowError, match="qmatmul_int8: W"):
        catalogue.OPS["qmatmul_int8"].submit(h, 0, x_dtype="fp32", scale_dtype="fp32", out_dtype="fp32", M=1, N=5, K=64,
                                             x=x, W=q, scales=s, C=None, out=h.empty((1, 5)))


@pytest.mark.parametrize("bad", [np.zeros((0, 4)), np.zeros(4), np.array([[1.0, np.nan]]), np.ones((2, 2), np.int32)])
def test_quantizer_refuses_bad_weights(bad):
    with pytest.raises(BadArgumentError, match="quantize_int8"):
        quantize.quantize_int8(bad)
