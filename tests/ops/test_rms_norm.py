"""rms_norm forward, bwd_x and bwd_w on each backend against PyTorch and a numpy replay of the kernels.

The convention is Hugging Face LlamaRMSNorm's (ops.h): in fp32, rstd = 1/sqrt(mean(x^2) + eps),
y = w * to_dtype(x * rstd), the normalized row rounded to the dtype before the weight multiply.
The backward is the fp32 gradient of w * x * rstd, rounded once.

Three kinds of check:
- a numpy float32 replay of the order the host kernels document (the vulkan kernels follow it
  too: bit for bit on host, within one rounding elsewhere, tolerances.assert_replay) (16-lane row sums added l+8, l+4,
  l+2, l+1, then the tail; dw summed over fixed 64-row blocks, then over blocks) must match
  bit for bit, which also pins the results to be independent of threads and SIMD path;
- PyTorch (CPU): the forward against LlamaRMSNorm's code run in the dtype, the backward
  against autograd in fp32 rounded once, with the tolerances of tolerances.py;
- in bf16/fp16 the gradients are no less accurate than torch's own autograd in that dtype.
"""
import numpy as np
import pytest
import torch

import dataflow as df
from dtype_rounding import TORCH, UINT, quantize
from conftest import handle_fixture
from tolerances import TOLERANCES, TWO_ROUNDING_TOLERANCES, assert_replay, sum_tolerance

DTYPES = ("fp32", "fp16", "bf16")
# odd hidden sizes (tails of 1..15 after the 16-lane part), rows around the 64-row dw block
SHAPES = [(1, 1), (1, 7), (3, 16), (5, 17), (2, 100), (65, 33), (130, 257), (7, 4099), (64, 1024)]
EPS = 1e-6
BLOCK_ROWS = 64
OPS = ("rms_norm", "rms_norm_bwd_x", "rms_norm_bwd_w_partials", "rms_norm_bwd_w_reduce")


h = handle_fixture("h", OPS, streams=2)


def data(rows, hidden, dtype, seed):
    """x, w, dy as float32 values exactly representable in dtype."""
    rng = np.random.default_rng(seed)
    x = quantize(rng.standard_normal((rows, hidden)) * 3.0, dtype)
    w = quantize(1.0 + 0.5 * rng.standard_normal(hidden), dtype)
    dy = quantize(rng.standard_normal((rows, hidden)), dtype)
    return x, w, dy


def put(h, dtype, *arrays):
    return [h.from_numpy(a, dtype=dtype) for a in arrays]


def forward(h, rows, hidden, dtype, seed):
    """data() for a backward test, on the device, and the forward's rstd."""
    x, w, dy = data(rows, hidden, dtype, seed)
    d_x, d_w, d_dy = put(h, dtype, x, w, dy)
    _, rstd = df.ops.rms_norm(h, d_x, d_w, eps=EPS)
    return x, w, dy, d_x, d_w, d_dy, rstd


def bits(arr):
    return arr.raw().view(UINT[arr.dtype])


# ---- numpy replay of the kernels' fp32 operation order ----

f32 = np.float32


def lane_sum(v):
    """Row sums of v [rows, n] as the kernels add them: 16 lanes, tree, then the tail."""
    rows, n = v.shape
    n16 = n // 16 * 16
    acc = np.zeros((rows, 16), f32)
    for k in range(0, n16, 16):
        acc += v[:, k:k + 16]
    s8 = acc[:, :8] + acc[:, 8:]
    s4 = s8[:, :4] + s8[:, 4:]
    s2 = s4[:, :2] + s4[:, 2:]
    s = s2[:, 0] + s2[:, 1]
    for j in range(n16, n):
        s = s + v[:, j]
    return s


def replay_forward(x, w, eps, dtype):
    rstd = f32(1) / np.sqrt(lane_sum(x * x) / f32(x.shape[1]) + f32(eps))
    return quantize(w * quantize(x * rstd[:, None], dtype), dtype), rstd


def replay_bwd_x(dy, x, w, rstd, dtype):
    g = dy * w
    c = (rstd * rstd) * (lane_sum(g * x) / f32(x.shape[1]))
    return quantize(rstd[:, None] * (g - x * c[:, None]), dtype)


def replay_bwd_w(dy, x, rstd, dw_dtype):
    rows, hidden = x.shape
    blocks = -(-rows // BLOCK_ROWS)
    term = np.zeros((blocks * BLOCK_ROWS, hidden), f32)
    term[:rows] = dy * (x * rstd[:, None])
    term = term.reshape(blocks, BLOCK_ROWS, hidden)
    workspace = np.zeros((blocks, hidden), f32)
    for r in range(BLOCK_ROWS):  # rows in order within each block (padding adds +0: exact)
        workspace += term[:, r]
    dw = np.zeros(hidden, f32)
    for b in range(blocks):
        dw += workspace[b]
    return quantize(dw, dw_dtype)


# ---- PyTorch oracles ----

def hf_llama_rms_norm(x, w, eps):
    """transformers' LlamaRMSNorm.forward, verbatim."""
    input_dtype = x.dtype
    hidden_states = x.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return w * hidden_states.to(input_dtype)


def torch_grads(x, w, dy, dtype):
    """(dx, dw) from autograd through hf_llama_rms_norm in dtype (fp32 math for "fp32")."""
    tx = torch.from_numpy(x).to(TORCH[dtype]).requires_grad_()
    tw = torch.from_numpy(w).to(TORCH[dtype]).requires_grad_()
    hf_llama_rms_norm(tx, tw, EPS).backward(torch.from_numpy(dy).to(TORCH[dtype]))
    return tx.grad.float().numpy(), tw.grad.float().numpy()


# ---- forward ----

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,hidden", SHAPES)
def test_forward(h, dtype, rows, hidden):
    x, w, _ = data(rows, hidden, dtype, 1)
    dx_, dw_ = put(h, dtype, x, w)
    y, rstd = df.ops.rms_norm(h, dx_, dw_, eps=EPS)
    assert y.dtype == dtype and y.shape == (rows, hidden) and rstd.dtype == "fp32" and rstd.shape == (rows,)

    want_y, want_rstd = replay_forward(x, w, EPS, dtype)
    assert_replay(h, rstd.numpy(), want_rstd, TOLERANCES["fp32"])
    assert_replay(h, y.numpy(), want_y, TWO_ROUNDING_TOLERANCES[dtype])

    # against the Hugging Face module run in the dtype; rstd from torch's own fp32 mean
    tx, tw = torch.from_numpy(x).to(TORCH[dtype]), torch.from_numpy(w).to(TORCH[dtype])
    np.testing.assert_allclose(y.numpy(), hf_llama_rms_norm(tx, tw, EPS).float().numpy(),
                               **TWO_ROUNDING_TOLERANCES[dtype])
    t_rstd = torch.rsqrt(torch.from_numpy(x).pow(2).mean(-1) + EPS).numpy()
    np.testing.assert_allclose(rstd.numpy(), t_rstd, **TOLERANCES["fp32"])


def test_forward_fp32_matches_functional_rms_norm(h):
    """In fp32 the HF convention and torch.nn.functional.rms_norm coincide."""
    x, w, _ = data(33, 257, "fp32", 2)
    y, _ = df.ops.rms_norm(h, *put(h, "fp32", x, w), eps=1e-5)
    want = torch.nn.functional.rms_norm(torch.from_numpy(x), (257,), torch.from_numpy(w), eps=1e-5)
    np.testing.assert_allclose(y.numpy(), want.numpy(), **TOLERANCES["fp32"])


@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_in_place_3d_and_given_rstd(h, dtype):
    """out=x overwrites x; leading dimensions are rows; a given rstd is filled."""
    x, w, _ = data(6, 129, dtype, 3)
    dx_, dw_ = put(h, dtype, x.reshape(2, 3, 129), w)
    rstd = h.empty((6,), "fp32")
    y, r = df.ops.rms_norm(h, dx_, dw_, eps=EPS, out=dx_, rstd=rstd)
    assert y is dx_ and r is rstd and y.shape == (2, 3, 129)
    want_y, want_rstd = replay_forward(x, w, EPS, dtype)
    assert_replay(h, y.numpy().reshape(6, 129), want_y, TWO_ROUNDING_TOLERANCES[dtype])
    assert_replay(h, r.numpy(), want_rstd, TOLERANCES["fp32"])


@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_extremes(h, dtype):
    """A zero row gives y = 0 and rstd = 1/sqrt(eps); huge and tiny rows still normalize;
    eps = 0 on a zero row gives rstd = Inf and NaN outputs (0 * Inf), as torch."""
    big = {"fp32": 1e18, "fp16": 6e4, "bf16": 1e18}[dtype]  # x^2 summed stays finite in fp32
    x = np.zeros((4, 40), np.float32)
    x[1] = big * np.linspace(-1, 1, 40)
    x[2] = 1e-3 * np.linspace(-1, 1, 40)
    x[3, 5] = -7.0
    x = quantize(x, dtype)
    w = quantize(np.linspace(0.5, 2.0, 40), dtype)
    y, rstd = df.ops.rms_norm(h, *put(h, dtype, x, w), eps=EPS)
    want_y, want_rstd = replay_forward(x, w, EPS, dtype)
    assert_replay(h, rstd.numpy(), want_rstd, TOLERANCES["fp32"])
    assert_replay(h, y.numpy(), want_y, TWO_ROUNDING_TOLERANCES[dtype])
    assert np.all(y.numpy()[0] == 0) and rstd.numpy()[0] == np.float32(1) / np.sqrt(np.float32(EPS))
    tx, tw = torch.from_numpy(x).to(TORCH[dtype]), torch.from_numpy(w).to(TORCH[dtype])
    np.testing.assert_allclose(y.numpy(), hf_llama_rms_norm(tx, tw, EPS).float().numpy(),
                               **TWO_ROUNDING_TOLERANCES[dtype])

    y0, r0 = df.ops.rms_norm(h, *put(h, dtype, x[:1], w), eps=0.0)
    assert r0.numpy()[0] == np.inf and np.all(np.isnan(y0.numpy()))


# ---- bwd_x ----

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,hidden", SHAPES)
def test_bwd_x(h, dtype, rows, hidden):
    x, w, dy, d_x, d_w, d_dy, rstd = forward(h, rows, hidden, dtype, 4)
    dx = df.ops.rms_norm_bwd_x(h, d_dy, d_x, d_w, rstd)
    assert dx.dtype == dtype and dx.shape == (rows, hidden)
    assert_replay(h, dx.numpy(), replay_bwd_x(dy, x, w, rstd.numpy(), dtype), TOLERANCES[dtype])

    want, _ = torch_grads(x, w, dy, "fp32")
    np.testing.assert_allclose(dx.numpy(), quantize(want, dtype), **sum_tolerance(dtype, hidden))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alias", ["dy", "x"])
def test_bwd_x_in_place(h, dtype, alias):
    x, w, dy, d_x, d_w, d_dy, rstd = forward(h, 9, 300, dtype, 5)
    want = replay_bwd_x(dy, x, w, rstd.numpy(), dtype)
    target = d_dy if alias == "dy" else d_x
    assert df.ops.rms_norm_bwd_x(h, d_dy, d_x, d_w, rstd, dx=target) is target
    assert_replay(h, target.numpy(), want, TOLERANCES[dtype])


# ---- bwd_w ----

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,hidden", SHAPES)
def test_bwd_w(h, dtype, rows, hidden):
    x, w, dy, d_x, d_w, d_dy, rstd = forward(h, rows, hidden, dtype, 6)
    _, want = torch_grads(x, w, dy, "fp32")
    for dw_dtype in sorted({dtype, "fp32"}):
        dw = df.ops.rms_norm_bwd_w(h, d_dy, d_x, rstd, dw_dtype=dw_dtype)
        assert dw.dtype == dw_dtype and dw.shape == (hidden,)
        assert_replay(h, dw.numpy(), replay_bwd_w(dy, x, rstd.numpy(), dw_dtype), TOLERANCES[dw_dtype])
        np.testing.assert_allclose(dw.numpy(), quantize(want, dw_dtype), **sum_tolerance(dw_dtype, rows))


def test_bwd_w_workspace_size_and_given_workspace(h):
    for rows, hidden in ((1, 1), (64, 10), (65, 10), (1000, 4096)):
        assert df.ops.rms_norm_bwd_w_workspace_bytes(rows, hidden) == -(-rows // BLOCK_ROWS) * hidden * 4
    assert df.ops.rms_norm_bwd_w_workspace_bytes(0, 5) == 0
    x, w, dy, d_x, d_w, d_dy, rstd = forward(h, 200, 70, "bf16", 7)
    workspace = h.empty((4 * 70 + 5,), "fp32")  # larger than needed is fine
    dw = h.empty((70,), "fp32")
    h.wait(1, h.record(0))  # rstd comes from stream 0
    assert df.ops.rms_norm_bwd_w(h, d_dy, d_x, rstd, dw=dw, workspace=workspace, stream=1) is dw
    h.sync()
    assert_replay(h, dw.numpy(), replay_bwd_w(dy, x, rstd.numpy(), "fp32"), TOLERANCES["fp32"])


# ---- accuracy against torch's own low-precision autograd ----

@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_grads_no_less_accurate_than_torch_in_dtype(h, dtype):
    """Error against the fp32 gradient: ours (fp32 inside, one rounding) is at most torch's
    autograd through LlamaRMSNorm in the dtype (which rounds dy * w and dy * q first)."""
    rows, hidden = 256, 512
    x, w, dy, d_x, d_w, d_dy, rstd = forward(h, rows, hidden, dtype, 8)
    dx = df.ops.rms_norm_bwd_x(h, d_dy, d_x, d_w, rstd).numpy()
    dw = df.ops.rms_norm_bwd_w(h, d_dy, d_x, rstd).numpy()
    exact_dx, exact_dw = torch_grads(x, w, dy, "fp32")
    torch_dx, torch_dw = torch_grads(x, w, dy, dtype)
    for ours, theirs, exact in ((dx, torch_dx, exact_dx), (dw, torch_dw, exact_dw)):
        assert np.abs(ours - exact).max() <= np.abs(theirs - exact).max()
        assert np.linalg.norm(ours - exact) <= np.linalg.norm(theirs - exact)


# ---- determinism: _run_all is what test_determinism.py compares across threads and SIMD paths ----

def _run_all(handle, rows=300, hidden=1000):
    """Every rms_norm variant; returns the outputs' bits."""
    outs = []
    for dtype in DTYPES:
        x, w, dy = data(rows, hidden, dtype, 9)
        d_x, d_w, d_dy = put(handle, dtype, x, w, dy)
        y, rstd = df.ops.rms_norm(handle, d_x, d_w, eps=EPS)
        outs += [bits(y), bits(rstd), bits(df.ops.rms_norm_bwd_x(handle, d_dy, d_x, d_w, rstd))]
        for dw_dtype in sorted({dtype, "fp32"}):
            outs.append(bits(df.ops.rms_norm_bwd_w(handle, d_dy, d_x, rstd, dw_dtype=dw_dtype)))
    return outs


# ---- bad input ----

def test_bad_input(h):
    x, w, dy = data(100, 70, "bf16", 10)
    d_x, d_w, d_dy = put(h, "bf16", x, w, dy)
    _, rstd = df.ops.rms_norm(h, d_x, d_w)
    with pytest.raises(df.BadArgumentError,
                       match=r"rms_norm: w must have shape \[hidden\] with hidden = 70 \(from x\), got \(69,\)"):
        df.ops.rms_norm(h, d_x, h.from_numpy(w[:69], dtype="bf16"))
    with pytest.raises(df.BadArgumentError, match=r"rms_norm: eps must be >= 0, got -1"):
        df.ops.rms_norm(h, d_x, d_w, eps=-1.0)
    with pytest.raises(df.BadArgumentError, match="rms_norm_bwd_x: rstd must be fp32, got bf16"):
        df.ops.rms_norm_bwd_x(h, d_dy, d_x, d_w, h.empty((100,), "bf16"))
    with pytest.raises(df.BadArgumentError, match=r"dw dtype must be one of \{bf16, fp32\}, got fp16"):
        df.ops.rms_norm_bwd_w(h, d_dy, d_x, rstd, dw_dtype="fp16")
    with pytest.raises(df.BadArgumentError, match="workspace"):
        df.ops.rms_norm_bwd_w(h, d_dy, d_x, rstd, workspace=h.empty((70,), "fp32"))  # needs 2 blocks
    with pytest.raises(df.BadArgumentError, match="rms_norm: x/w/out dtype must be one of"):
        df.ops.rms_norm(h, h.from_numpy(np.ones((2, 3), np.int32)), h.from_numpy(np.ones(3, np.int32)))
