"""swiglu forward and backward on each backend against PyTorch and a numpy replay of the kernels.

The convention is F.silu(gate) * up, as Hugging Face LlamaMLP computes it (ops.h): silu in
fp32, rounded to the dtype before the multiply by up. The kernels take the sigmoid from
e = exp(-|g|), which cannot overflow. The backward is the fp32 gradient, each output rounded
once.

- a numpy float32 replay of the host kernels' operations (their exp included) must match bit
  for bit, which also pins the results to be independent of threads and SIMD path (other
  backends follow the same operations, within two roundings: tolerances.assert_replay);
- PyTorch (CPU): the forward against F.silu(gate) * up in the dtype, the backward against
  autograd in fp32 rounded once, with the tolerances of tolerances.py; in bf16/fp16 the
  gradients are no less accurate than torch's autograd in that dtype.
"""
import numpy as np
import pytest
import torch

import dataflow as df
from dtype_rounding import TORCH, UINT, quantize
from conftest import handle_fixture
from tolerances import TOLERANCES, TWO_ROUNDING_TOLERANCES, assert_replay

DTYPES = ("fp32", "fp16", "bf16")
SHAPES = [(1, 1), (1, 15), (3, 17), (7, 100), (33, 257), (64, 1024), (5, 11008)]


h = handle_fixture("h", ("swiglu", "swiglu_bwd"), streams=2)


def data(rows, ffn, dtype, seed, scale=3.0):
    """gate, up, d_out as float32 values exactly representable in dtype."""
    rng = np.random.default_rng(seed)
    return [quantize(rng.standard_normal((rows, ffn)) * s, dtype) for s in (scale, 1.0, 1.0)]


def put(h, dtype, *arrays):
    return [h.from_numpy(a, dtype=dtype) for a in arrays]


def bits(arr):
    return arr.raw().view(UINT[arr.dtype])


# ---- numpy replay of the kernels' fp32 operations ----

f32 = np.float32


def fma(a, b, c):
    """fmaf of float32 arrays: the product is exact in float64; the sum rounds twice, which
    differs from one rounding only when float64 lands exactly halfway between two floats
    (odds about 2^-29 per element; the data here are fixed)."""
    return (a.astype(np.float64) * b + c).astype(f32)


def replay_exp(x):
    """simd_exp.h's exp for x <= 0 (Cephes expf in fma; 0 below -87.33)."""
    with np.errstate(over="ignore", invalid="ignore"):
        t = fma(x, f32(1.44269504088896341), f32(12582912.0))
        n = t - f32(12582912.0)
        r = fma(-n, f32(0.693359375), x)
        r = fma(-n, f32(-2.12194440e-4), r)
        y = fma(f32(1.9875691500e-4), r, f32(1.3981999507e-3))
        for c in (8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
            y = fma(y, r, f32(c))
        y = fma(y, r * r, r) + f32(1.0)
        scale = ((t.view(np.uint32) - np.uint32(0x4B400000) + np.uint32(127)) << np.uint32(23)).view(f32)
        e = y * scale
    e[x < f32(-87.33)] = 0.0
    return e


def replay_sigmoid_parts(gate):
    """(silu, s, d): the kernels' e = exp(-|g|), d = 1 + e, s = sigmoid, silu = g * s."""
    with np.errstate(over="ignore", invalid="ignore"):
        e = replay_exp(-np.abs(gate))
        d = f32(1) + e
        neg = gate < 0
        return np.where(neg, gate * e, gate) / d, np.where(neg, e, f32(1)) / d


def replay_forward(gate, up, dtype):
    with np.errstate(over="ignore", invalid="ignore"):
        silu, _ = replay_sigmoid_parts(gate)
        return quantize(quantize(silu, dtype) * up, dtype)


def replay_backward(d_out, gate, up, dtype):
    with np.errstate(over="ignore", invalid="ignore"):
        silu, s = replay_sigmoid_parts(gate)
        d_gate = ((d_out * up) * s) * (f32(1) + gate * (f32(1) - s))
        d_up = d_out * silu
    return quantize(d_gate, dtype), quantize(d_up, dtype)


def torch_grads(gate, up, d_out, dtype):
    """(d_gate, d_up) by autograd through F.silu(gate) * up in dtype."""
    tg = torch.from_numpy(gate).to(TORCH[dtype]).requires_grad_()
    tu = torch.from_numpy(up).to(TORCH[dtype]).requires_grad_()
    (torch.nn.functional.silu(tg) * tu).backward(torch.from_numpy(d_out).to(TORCH[dtype]))
    return tg.grad.float().numpy(), tu.grad.float().numpy()


def assert_same(h, got, want, dtype, what):
    """The replay's values, NaN matching NaN (tolerances.assert_replay: bit for bit on host)."""
    assert_replay(h, got, want, TWO_ROUNDING_TOLERANCES[dtype], what)


def test_replay_exp_is_accurate():
    """The exp the kernels use is within 1.01 ulp of a float64 exp over its normal range."""
    x = np.linspace(-87.3, 0.0, 2_000_001, dtype=f32)
    got = replay_exp(x).astype(np.float64)
    want = np.exp(x.astype(np.float64))
    ulp = np.spacing(want.astype(f32)).astype(np.float64)
    assert np.max(np.abs(got - want) / ulp) <= 1.01


# ---- forward ----

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,ffn", SHAPES)
def test_forward(h, dtype, rows, ffn):
    gate, up, _ = data(rows, ffn, dtype, 1)
    out = df.ops.swiglu(h, *put(h, dtype, gate, up))
    assert out.dtype == dtype and out.shape == (rows, ffn)
    assert_same(h, out.numpy(), replay_forward(gate, up, dtype), dtype, "replay")
    tg, tu = torch.from_numpy(gate).to(TORCH[dtype]), torch.from_numpy(up).to(TORCH[dtype])
    want = (torch.nn.functional.silu(tg) * tu).float().numpy()
    np.testing.assert_allclose(out.numpy(), want, **TWO_ROUNDING_TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_special_values(h, dtype):
    """Inf, NaN, signed zeros and the ends of exp's range give what torch gives."""
    big = {"fp32": 3e38, "fp16": 6e4, "bf16": 3e38}[dtype]
    g = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 88.7, 88.9, -86.9, -87.1, -88.8, -89.0, -100.0, 100.0,
                  big, -big, 1e-30, -1e-30, 20.0, -20.0], np.float32)
    g = quantize(g, dtype)
    u = quantize(np.linspace(-2.0, 3.0, g.size), dtype)
    out = df.ops.swiglu(h, *put(h, dtype, g, u)).numpy()
    assert_same(h, out, replay_forward(g, u, dtype), dtype, "replay")
    tg, tu = torch.from_numpy(g).to(TORCH[dtype]), torch.from_numpy(u).to(TORCH[dtype])
    want = (torch.nn.functional.silu(tg) * tu).float().numpy()
    np.testing.assert_allclose(out, want, equal_nan=True, **TWO_ROUNDING_TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alias", ["gate", "up"])
def test_forward_in_place(h, dtype, alias):
    gate, up, _ = data(3, 1001, dtype, 2)
    d_gate, d_up = put(h, dtype, gate, up)
    target = d_gate if alias == "gate" else d_up
    assert df.ops.swiglu(h, d_gate, d_up, out=target) is target
    assert_same(h, target.numpy(), replay_forward(gate, up, dtype), dtype, "in place")


# ---- backward ----

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,ffn", SHAPES)
def test_backward(h, dtype, rows, ffn):
    gate, up, d_out = data(rows, ffn, dtype, 3)
    d_gate, d_up = df.ops.swiglu_bwd(h, *put(h, dtype, d_out, gate, up))
    assert d_gate.dtype == d_up.dtype == dtype and d_gate.shape == d_up.shape == (rows, ffn)
    want_gate, want_up = replay_backward(d_out, gate, up, dtype)
    assert_same(h, d_gate.numpy(), want_gate, dtype, "replay d_gate")
    assert_same(h, d_up.numpy(), want_up, dtype, "replay d_up")
    t_gate, t_up = torch_grads(gate, up, d_out, "fp32")
    np.testing.assert_allclose(d_gate.numpy(), quantize(t_gate, dtype), **TOLERANCES[dtype])
    np.testing.assert_allclose(d_up.numpy(), quantize(t_up, dtype), **TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_wide_range(h, dtype):
    """gate out to +-100 (exp saturating both ways) still matches torch."""
    gate, up, d_out = data(4, 999, dtype, 4, scale=40.0)
    d_gate, d_up = df.ops.swiglu_bwd(h, *put(h, dtype, d_out, gate, up))
    t_gate, t_up = torch_grads(gate, up, d_out, "fp32")
    np.testing.assert_allclose(d_gate.numpy(), quantize(t_gate, dtype), **TOLERANCES[dtype])
    np.testing.assert_allclose(d_up.numpy(), quantize(t_up, dtype), **TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_in_place(h, dtype):
    """d_gate over gate and d_up over up, the usual way to save memory."""
    gate, up, d_out = data(5, 777, dtype, 5)
    dd, dg, du = put(h, dtype, d_out, gate, up)
    want_gate, want_up = replay_backward(d_out, gate, up, dtype)
    got_gate, got_up = df.ops.swiglu_bwd(h, dd, dg, du, d_gate=dg, d_up=du)
    assert got_gate is dg and got_up is du
    assert_same(h, dg.numpy(), want_gate, dtype, "d_gate in place")
    assert_same(h, du.numpy(), want_up, dtype, "d_up in place")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_grads_no_less_accurate_than_torch_in_dtype(h, dtype):
    gate, up, d_out = data(128, 1000, dtype, 6)
    d_gate, d_up = df.ops.swiglu_bwd(h, *put(h, dtype, d_out, gate, up))
    exact = torch_grads(gate, up, d_out, "fp32")
    theirs = torch_grads(gate, up, d_out, dtype)
    for ours, t, e in zip((d_gate.numpy(), d_up.numpy()), theirs, exact):
        assert np.abs(ours - e).max() <= np.abs(t - e).max()
        assert np.linalg.norm(ours - e) <= np.linalg.norm(t - e)


# ---- determinism: _run_all is what test_determinism.py compares across threads and SIMD paths ----

def _run_all(handle, rows=100, ffn=1001):
    outs = []
    for dtype in DTYPES:
        gate, up, d_out = data(rows, ffn, dtype, 7, scale=10.0)
        dd, dg, du = put(handle, dtype, d_out, gate, up)
        outs.append(bits(df.ops.swiglu(handle, dg, du)))
        outs += [bits(a) for a in df.ops.swiglu_bwd(handle, dd, dg, du)]
    return outs


# ---- bad input ----

def test_bad_input(h):
    gate, up, d_out = data(4, 10, "bf16", 8)
    dd, dg, du = put(h, "bf16", d_out, gate, up)
    with pytest.raises(df.BadArgumentError, match=r"swiglu: up must be bf16 \(like gate\), got fp32"):
        df.ops.swiglu(h, dg, h.from_numpy(up))
    with pytest.raises(df.BadArgumentError, match=r"swiglu: out must be bf16 \(like gate\), got fp32"):
        df.ops.swiglu(h, dg, du, out=h.empty((4, 10), "fp32"))
    with pytest.raises(df.BadArgumentError, match="d_gate and d_up are the same buffer"):
        df.ops.swiglu_bwd(h, dd, dg, du, d_gate=dd, d_up=dd)
    with pytest.raises(df.BadArgumentError, match="dtype must be one of"):
        df.ops.swiglu(h, h.from_numpy(np.ones((2, 3), np.int32)), h.from_numpy(np.ones((2, 3), np.int32)))
