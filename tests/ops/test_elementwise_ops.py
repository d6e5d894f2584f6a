"""Elementwise ops add / scale / cast / set_mem against numpy, ml_dtypes and torch oracles.

add computes alpha * a + beta * b in fp32 (two products, one sum, no fma) and rounds once to
the dtype, so a numpy float32 oracle on the same (already rounded) inputs must match bit for
bit; torch, computing in fp32 as well, is checked with the tolerance table. scale (alpha * x,
one fp32 product rounded once) matches torch.mul bit for bit. Results must not depend on the
thread count (part boundaries) or the SIMD path."""

import numpy as np
import pytest
import torch

import dataflow as df
from dataflow._ffi import ffi
from tolerances import TOLERANCES
from dtype_rounding import REF, TORCH, UINT, quantize

FLOATS = ("fp32", "fp16", "bf16", "fp8e4m3", "fp8e5m2")
ADD_DTYPES = ("fp32", "fp16", "bf16")
SIZES = (1, 7, 33, 1000, 100003)


@pytest.fixture(scope="module", params=("host", "cuda", "vulkan"))
def h(request):
    """add / cast / set_mem run on every backend against the same oracles."""
    from conftest import open_handle
    with open_handle(request.param, streams=2) as handle:
        yield handle


def bits(arr):
    """Stored bits of a device array."""
    return arr.raw().view(UINT[arr.dtype])


def ref_bits(x, dtype):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x, np.float32).astype(REF[dtype]).view(UINT[dtype])


def values(n, seed, specials=True):
    """n float32 values at mixed scales; with specials, Inf/NaN/huge/subnormal ones too."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 5, n)).astype(np.float32)
    if specials and n >= 7:
        at = rng.choice(n, 7, replace=False)
        x[at] = [np.inf, -np.inf, np.nan, 6e4, -3e38, 1e-40, -0.0]
    return x


def assert_same_values(got_bits, want_bits, dtype, what):
    """Bitwise equal, except that any NaN matches any NaN."""
    with np.errstate(invalid="ignore"):
        got = got_bits.view(REF[dtype]).astype(np.float32)
        want = want_bits.view(REF[dtype]).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{what}: NaN positions differ"
    bad = np.flatnonzero(got_bits[~nan] != want_bits[~nan])
    assert bad.size == 0, (f"{what}: {bad.size} of {got.size} differ, first at {np.flatnonzero(~nan)[bad[0]]}: "
                           f"got {got[~nan][bad[0]]} want {want[~nan][bad[0]]}")


def add_oracle(alpha, a, beta, b, dtype):
    with np.errstate(over="ignore", invalid="ignore"):
        return ref_bits(np.float32(alpha) * a + np.float32(beta) * b, dtype)


# ---- add ----

@pytest.mark.parametrize("dtype", ADD_DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_add(h, dtype, n):
    a, b = values(n, 1), values(n, 2)
    da, db = h.from_numpy(a, dtype=dtype), h.from_numpy(b, dtype=dtype)
    out = df.ops.add(h, da, db, alpha=0.75, beta=-1.25)
    qa, qb = quantize(a, dtype), quantize(b, dtype)
    assert_same_values(bits(out), add_oracle(0.75, qa, -1.25, qb, dtype), dtype, f"add {dtype} n={n}")

    # torch, computing in fp32 and rounding once, within the dtype's tolerance
    ta, tb = torch.from_numpy(qa), torch.from_numpy(qb)
    want = (0.75 * ta + -1.25 * tb).to(TORCH[dtype]).float().numpy()
    np.testing.assert_allclose(out.numpy().astype(np.float32), want, equal_nan=True, **TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", ADD_DTYPES)
def test_add_defaults_and_overflow(h, dtype):
    """alpha = beta = 1 is a plain sum; sums past the format's range give Inf."""
    big = {"fp32": 3e38, "fp16": 6e4, "bf16": 3e38}[dtype]
    a = np.array([1.0, -2.5, big, -big, 0.1, 1e-3], np.float32)
    b = np.array([2.0, 2.5, big, -big, 0.2, -1e-3], np.float32)
    out = df.ops.add(h, h.from_numpy(a, dtype=dtype), h.from_numpy(b, dtype=dtype))
    got = out.numpy().astype(np.float32)
    assert got[2] == np.inf and got[3] == -np.inf
    assert_same_values(bits(out), add_oracle(1.0, quantize(a, dtype), 1.0, quantize(b, dtype), dtype), dtype, "a + b")


@pytest.mark.parametrize("dtype", ADD_DTYPES)
@pytest.mark.parametrize("alias", ["a", "b"])
def test_add_out_aliases_input(h, dtype, alias):
    n = 100003
    a, b = values(n, 3), values(n, 4)
    da, db = h.from_numpy(a, dtype=dtype), h.from_numpy(b, dtype=dtype)
    out = df.ops.add(h, da, db, out=da if alias == "a" else db, alpha=2.0, beta=0.5)
    assert out is (da if alias == "a" else db)
    want = add_oracle(2.0, quantize(a, dtype), 0.5, quantize(b, dtype), dtype)
    assert_same_values(bits(out), want, dtype, f"add out={alias}")


@pytest.mark.parametrize("dtype", ADD_DTYPES)
def test_add_unaligned_views_on_second_stream(h, dtype):
    """Views one element in (pointers not vector-aligned), submitted on stream 1."""
    n = 4099
    a, b = values(n + 1, 5), values(n + 1, 6)
    da, db = h.from_numpy(a, dtype=dtype), h.from_numpy(b, dtype=dtype)
    out = h.empty((n + 1,), dtype)
    df.ops.add(h, da.view((n,), 1), db.view((n,), 1), out=out.view((n,), 1), alpha=-1.0, beta=3.0, stream=1)
    h.sync()
    want = add_oracle(-1.0, quantize(a[1:], dtype), 3.0, quantize(b[1:], dtype), dtype)
    assert_same_values(bits(out)[1:], want, dtype, "add on views")


# ---- scale ----

@pytest.mark.parametrize("dtype", ADD_DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_scale(h, dtype, n):
    x = values(n, 20)
    out = df.ops.scale(h, h.from_numpy(x, dtype=dtype), -0.3)
    qx = quantize(x, dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        assert_same_values(bits(out), ref_bits(np.float32(-0.3) * qx, dtype), dtype, f"scale {dtype} n={n}")
    # torch.mul with a Python float: the same fp32 product, rounded once
    want = torch.mul(torch.from_numpy(qx).to(TORCH[dtype]), -0.3)
    assert_same_values(bits(out), want.view({4: torch.int32, 2: torch.int16}[want.element_size()]).numpy()
                       .view(UINT[dtype]), dtype, f"scale {dtype} n={n} vs torch")


@pytest.mark.parametrize("dtype", ADD_DTYPES)
def test_scale_in_place_and_views(h, dtype):
    n = 4099
    x = values(n + 1, 21)
    dx = h.from_numpy(x, dtype=dtype)
    out = df.ops.scale(h, dx.view((n,), 1), 2.5, out=dx.view((n,), 1), stream=1)
    h.sync()
    assert out.ptr == dx.view((n,), 1).ptr
    got = bits(dx)
    with np.errstate(over="ignore", invalid="ignore"):
        want = ref_bits(np.float32(2.5) * quantize(x[1:], dtype), dtype)
    assert_same_values(got[1:], want, dtype, "scale in place")
    assert got[0] == ref_bits(x[:1], dtype)[0]  # the element before the view is untouched


def test_scale_bad_input(h):
    x = h.from_numpy(np.ones(8, np.float32))
    with pytest.raises(df.BadArgumentError, match=r"scale: out must be fp32 \(like x\), got bf16"):
        df.ops.scale(h, x, 2.0, out=h.empty((8,), "bf16"))
    with pytest.raises(df.BadArgumentError, match=r"scale: x/out dtype must be one of \{fp32, fp16, bf16\}, got int32"):
        df.ops.scale(h, h.from_numpy(np.ones(8, np.int32)), 2.0)
    submit = df.ops.opslib.dataflow_submit_scale
    fp32 = df.dtypes.enum("fp32")
    with pytest.raises(df.BadArgumentError, match="scale: n must be > 0, got 0"):
        df.errors.check(submit(h._ptr(), 0, fp32, 0, 1.0, x.cdata, x.cdata))
    with pytest.raises(df.BadArgumentError, match=r"scale: x \(9 fp32 elements = n\): .*past the end"):
        df.errors.check(submit(h._ptr(), 0, fp32, 9, 1.0, x.cdata, h.empty((9,)).cdata))
    with pytest.raises(df.BadArgumentError, match=r"scale: out is NULL"):
        df.errors.check(submit(h._ptr(), 0, fp32, 8, 1.0, x.cdata, ffi.NULL))
    with pytest.raises(df.BadArgumentError, match=r"scale: x \[.*\) and out \[.*\) overlap; out may only be exactly x"):
        df.ops.scale(h, x.view((4,), 0), 2.0, out=x.view((4,), 2))
    np.testing.assert_array_equal(x.numpy(), 1.0)  # nothing ran


# ---- cast ----

@pytest.mark.parametrize("src,dst", [(s, d) for s in FLOATS for d in FLOATS if s != d])
@pytest.mark.parametrize("n", SIZES)
def test_cast(h, src, dst, n):
    x = values(n, 7)
    out = df.ops.cast(h, h.from_numpy(x, dtype=src), dst)
    assert out.dtype == dst and out.shape == (n,)
    assert_same_values(bits(out), ref_bits(quantize(x, src), dst), dst, f"cast {src} -> {dst} n={n}")


def test_cast_into_given_out(h):
    x = values(1000, 8)
    out = h.empty((1000,), "bf16")
    assert df.ops.cast(h, h.from_numpy(x), "bf16", out=out) is out
    assert_same_values(bits(out), ref_bits(x, "bf16"), "bf16", "cast out=")


# ---- outputs of 16 MiB and more: written with streaming stores, same bits ----

STREAM_BYTES = 16 << 20


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ADD_DTYPES)
@pytest.mark.parametrize("alias", [None, "a"])
def test_add_large_output(dtype, alias):
    size = 4 if dtype == "fp32" else 2
    n = STREAM_BYTES // size + 1001  # not a multiple of a chunk or a vector
    a, b = values(n + 1, 21), values(n + 1, 22)
    with df.Handle("host", threads=2, device_memory="256MiB") as h:
        da, db = h.from_numpy(a, dtype=dtype), h.from_numpy(b, dtype=dtype)
        if alias:
            out = df.ops.add(h, da, db, out=da, alpha=0.75, beta=-1.25)
            got, want = bits(out), add_oracle(0.75, quantize(a, dtype), -1.25, quantize(b, dtype), dtype)
        else:  # views one element in: the output is not line-aligned
            out = h.empty((n + 1,), dtype)
            df.ops.add(h, da.view((n,), 1), db.view((n,), 1), out=out.view((n,), 1), alpha=0.75, beta=-1.25)
            got = bits(out)[1:]
            want = add_oracle(0.75, quantize(a[1:], dtype), -1.25, quantize(b[1:], dtype), dtype)
        assert_same_values(got, want, dtype, f"add {dtype} n={n} out={alias}")


@pytest.mark.parametrize("src,dst", [("fp32", "bf16"), ("fp32", "fp16"), ("bf16", "fp32"), ("fp16", "fp32"),
                                     ("fp8e4m3", "fp16")])
@pytest.mark.slow
def test_cast_large_output(src, dst):
    size = {"fp32": 4, "fp16": 2, "bf16": 2}[dst]
    n = STREAM_BYTES // size + 1001
    x = values(n + 1, 23)
    with df.Handle("host", threads=2, device_memory="256MiB") as h:
        out = h.empty((n + 1,), dst)
        df.ops.cast(h, h.from_numpy(x, dtype=src).view((n,), 1), dst, out=out.view((n,), 1))
        assert_same_values(bits(out)[1:], ref_bits(quantize(x[1:], src), dst), dst, f"cast {src} -> {dst} n={n}")


# ---- set_mem ----

@pytest.mark.parametrize("dtype", ADD_DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_set_mem(h, dtype, n):
    x = h.from_numpy(values(n, 9), dtype=dtype)
    for value in (1.0 / 3.0, -0.0, 1e9, -1e-42, np.inf, 65520.0):
        df.ops.set_mem(h, x, value)
        assert_same_values(bits(x), np.full(n, ref_bits([value], dtype)[0]), dtype, f"set_mem {value}")
    df.ops.set_mem(h, x, np.nan)
    assert np.all(np.isnan(x.numpy()))


def test_set_mem_leaves_neighbours(h):
    x = h.from_numpy(np.zeros(1000, np.float32), dtype="bf16")
    df.ops.set_mem(h, x.view((997,), 2), 7.0)
    got = x.numpy()
    assert np.all(got[2:999] == 7.0) and np.all(got[:2] == 0) and got[999] == 0


# ---- determinism: _run_all is what test_determinism.py compares across threads and SIMD paths ----

def _run_all(handle, n=1_000_003):
    """Every add / scale / cast / set_mem variant on n elements; returns the outputs' bits."""
    outs = []
    for dtype in ADD_DTYPES:
        a = handle.from_numpy(values(n, 10), dtype=dtype)
        b = handle.from_numpy(values(n, 11), dtype=dtype)
        outs.append(bits(df.ops.add(handle, a, b, alpha=0.3, beta=-0.7)))
        outs.append(bits(df.ops.scale(handle, b, 1.7)))
        df.ops.set_mem(handle, a, 0.1)
        outs.append(bits(a))
    for src in FLOATS:
        x = handle.from_numpy(values(n, 12), dtype=src)
        outs.extend(bits(df.ops.cast(handle, x, dst)) for dst in FLOATS if dst != src)
    return outs


