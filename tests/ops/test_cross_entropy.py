"""cross_entropy (softmax fused, forward + backward) on each backend against torch autograd.

The oracle is torch.nn.functional.cross_entropy in fp32 on the logits as the device holds
them (rounded to the dtype), with autograd giving dlogits; the kernel computes in fp32 too
and rounds dlogits once. Results must not depend on thread count or SIMD path (bitwise)."""

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dataflow as df
from dataflow._ffi import ffi, opslib
from dataflow.errors import check
from conftest import handle_fixture
from tolerances import CROSS_ENTROPY_TOLERANCES as TOL

DTYPES = ("fp32", "bf16", "fp16")
REF = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}
UINT = {"fp32": np.uint32, "fp16": np.uint16, "bf16": np.uint16}
h = handle_fixture("h", ("cross_entropy",), streams=4, device_memory="256MiB")


def quantize(x, dtype):
    return np.asarray(x, np.float32).astype(REF[dtype]).astype(np.float32)


def problem(tokens, vocab, seed, ignore_index=-100):
    """Logits at a realistic spread (std 3, a few large ones) and labels with ~1/8 ignored."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((tokens, vocab)) * 3).astype(np.float32)
    x[rng.integers(0, tokens, 3), rng.integers(0, vocab, 3)] = 25.0
    y = rng.integers(0, vocab, tokens).astype(np.int64)
    y[rng.random(tokens) < 0.125] = ignore_index
    return x, y


def oracle(x, y, ignore_index=-100):
    """torch in fp64 on the fp32 inputs: per-token loss, mean loss, and d(mean loss)/dlogits.
    Not torch fp32: its CPU exp/log differ by build and ISA (AVX2 builds are off by up to 3e-5
    relative on rows with a large logit), more than the kernel's own error."""
    tx = torch.from_numpy(np.asarray(x, np.float64)).requires_grad_()
    ty = torch.from_numpy(y)
    loss = F.cross_entropy(tx, ty, ignore_index=ignore_index, reduction="none")
    mean = F.cross_entropy(tx, ty, ignore_index=ignore_index, reduction="mean")
    mean.backward()
    return loss.detach().numpy(), mean.item(), tx.grad.numpy()


def bits(a):
    return a.raw().view(UINT[a.dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", [1, 7, 33, 129])
@pytest.mark.parametrize("vocab", [1000, 32003, 50257])
def test_cross_entropy_matches_torch(h, dtype, tokens, vocab):
    x, y = problem(tokens, vocab, seed=tokens * vocab)
    y[0] = 5  # at least one valid token
    q = quantize(x, dtype)
    loss, dlogits = df.ops.cross_entropy(h, h.from_numpy(x, dtype=dtype), y)
    want_loss, want_mean, want_grad = oracle(q, y)
    got_loss = loss.numpy()
    np.testing.assert_allclose(got_loss, want_loss, **TOL["loss"])
    valid = np.count_nonzero(y != -100)
    np.testing.assert_allclose(got_loss.sum(dtype=np.float64) / valid, want_mean, **TOL["loss"])
    np.testing.assert_allclose(dlogits.numpy(), quantize(want_grad, dtype), **TOL[dtype])
    assert np.all(dlogits.numpy()[y == -100] == 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_inplace_and_scale(h, dtype):
    """dlogits="inplace" overwrites logits with the same bits as a separate output; an
    explicit scale multiplies the gradient (scale=1: gradient of the summed loss)."""
    x, y = problem(33, 32003, seed=1)
    out_loss, out = df.ops.cross_entropy(h, h.from_numpy(x, dtype=dtype), y, scale=1.0)
    logits = h.from_numpy(x, dtype=dtype)
    in_loss, inplace = df.ops.cross_entropy(h, logits, y, scale=1.0, dlogits="inplace")
    assert inplace is logits
    assert np.array_equal(bits(out), bits(inplace))
    assert np.array_equal(out_loss.raw(), in_loss.raw())
    tx = torch.from_numpy(quantize(x, dtype)).requires_grad_()
    F.cross_entropy(tx, torch.from_numpy(y), reduction="sum").backward()
    np.testing.assert_allclose(out.numpy(), quantize(tx.grad.numpy(), dtype), **TOL[dtype])


def test_ignore_index_and_all_ignored(h):
    x, y = problem(7, 1000, seed=2, ignore_index=3)
    y[:3] = 3
    loss, g = df.ops.cross_entropy(h, h.from_numpy(x), y, ignore_index=3)
    want_loss, _, want_grad = oracle(x, y, ignore_index=3)
    np.testing.assert_allclose(loss.numpy(), want_loss, **TOL["loss"])
    np.testing.assert_allclose(g.numpy(), want_grad, **TOL["fp32"])
    # nothing valid: zero loss and gradient (torch's mean would be 0/0)
    loss, g = df.ops.cross_entropy(h, h.from_numpy(x), np.full(7, -100))
    assert not loss.numpy().any() and not g.numpy().any()


def test_out_of_range_device_labels_give_zero(h):
    """Device labels are not validated on the host: bad ones must not be read through."""
    vocab = 1000
    x, _ = problem(6, vocab, seed=3)
    y = np.array([5, -7, vocab, 2**31 - 1, -2**31, 999], np.int32)
    loss, g = df.ops.cross_entropy(h, h.from_numpy(x), h.from_numpy(y), scale=0.5)
    got_loss, got = loss.numpy(), g.numpy()
    assert not got_loss[1:5].any() and not got[1:5].any()
    ok = np.array([0, 5])
    want_loss, _, want_grad = oracle(x[ok], y[ok].astype(np.int64))
    np.testing.assert_allclose(got_loss[ok], want_loss, **TOL["loss"])
    np.testing.assert_allclose(got[ok], want_grad, **TOL["fp32"])  # mean over 2 = scale 0.5


def test_masked_logits_and_huge_vocab(h):
    """-Inf logits (masked vocabulary) get probability 0; vocab 256k + 3 in one row."""
    x, y = problem(3, 262147, seed=4)
    y[:] = [0, 262146, 76]
    x[:, 1::2] = -np.inf
    x[1, 262146] = 0.5
    loss, g = df.ops.cross_entropy(h, h.from_numpy(x), y)
    want_loss, _, want_grad = oracle(x, y)
    np.testing.assert_allclose(loss.numpy(), want_loss, **TOL["loss"])
    np.testing.assert_allclose(g.numpy(), want_grad, **TOL["fp32"])
    assert not g.numpy()[:, 1:-1:2].any()


# ---- determinism: _run_all is what test_determinism.py compares across threads and SIMD paths ----

def _run_all(handle, tokens=33, vocab=50257):
    outs = []
    for dtype in DTYPES:
        x, y = problem(tokens, vocab, seed=5)
        loss, g = df.ops.cross_entropy(handle, handle.from_numpy(x, dtype=dtype), y)
        outs += [loss.raw(), bits(g)]
    return outs


# ---- bad input ----

def test_bad_input(h):
    x = h.from_numpy(np.zeros((4, 10), np.float32))
    with pytest.raises(df.BadArgumentError, match=r"logits dtype must be one of \{fp32, fp16, bf16\}, got int32"):
        df.ops.cross_entropy(h, h.from_numpy(np.zeros((4, 10), np.int32)), np.zeros(4, np.int32))
    with pytest.raises(df.BadArgumentError, match=r"logits must be 2-D \[tokens, vocab\], got shape \(40,\)"):
        df.ops.cross_entropy(h, x.reshape(40), np.zeros(40, np.int32))
    with pytest.raises(df.BadArgumentError, match=r"labels must be integers of shape \(4,\), got int64\(5,\)"):
        df.ops.cross_entropy(h, x, np.zeros(5, np.int64))
    with pytest.raises(df.BadArgumentError, match=r"labels must be integers of shape \(4,\), got float32\(4,\)"):
        df.ops.cross_entropy(h, x, np.zeros(4, np.float32))
    with pytest.raises(df.BadArgumentError, match=r"labels must be in \[0, 10\) or ignore_index=-100, got 10 at "
                                                 r"token 2 \(2 out of range\)"):
        df.ops.cross_entropy(h, x, np.array([0, 9, 10, -1]))
    with pytest.raises(df.BadArgumentError, match=r"cross_entropy: labels must be int32, got fp32"):
        df.ops.cross_entropy(h, x, h.from_numpy(np.zeros(4, np.float32)))
    with pytest.raises(df.BadArgumentError, match=r"cross_entropy: dlogits must be fp32 \(like logits\), got bf16"):
        df.ops.cross_entropy(h, x, np.zeros(4, np.int32), dlogits=h.empty((4, 10), "bf16"))
    with pytest.raises(df.BadArgumentError, match="dlogits must be an Array, None or 'inplace', got 'in place'"):
        df.ops.cross_entropy(h, x, np.zeros(4, np.int32), dlogits="in place")


def test_bad_input_c(h):
    """The C layer checks sizes and extents itself (labels stay unread on the host)."""
    x = h.from_numpy(np.zeros((4, 100), np.float32))
    y = h.from_numpy(np.zeros(4, np.int32))
    loss, g = h.empty(4, "fp32"), h.empty((4, 100), "fp32")
    i32, f32 = ffi.cast("int32_t *", y.ptr), ffi.cast("float *", loss.ptr)

    def submit(tokens, vocab, logits=x.cdata, labels=i32, loss=f32, dlogits=g.cdata, dtype="fp32"):
        check(opslib.dataflow_submit_cross_entropy(h._ptr(), 0, df.dtypes.enum(dtype), tokens, vocab, -100, 1.0,
                                                   logits, labels, loss, dlogits))

    with pytest.raises(df.BadArgumentError, match="cross_entropy: tokens must be > 0, got 0"):
        submit(0, 10)
    with pytest.raises(df.BadArgumentError, match="cross_entropy: vocab must be > 0, got -3"):
        submit(4, -3)
    with pytest.raises(df.BadArgumentError, match="overflows"):
        submit(2**40, 2**40)
    with pytest.raises(df.BadArgumentError, match=r"cross_entropy: logits \(800 fp32 elements = tokens\*vocab\)"):
        submit(4, 200)
    with pytest.raises(df.BadArgumentError, match=r"cross_entropy: labels \(400 int32 elements = tokens\)"):
        submit(400, 1)
    with pytest.raises(df.BadArgumentError, match="cross_entropy: dlogits is NULL"):
        submit(4, 100, dlogits=ffi.NULL)
    with pytest.raises(df.BadArgumentError, match=r"logits/dlogits dtype must be one of \{fp32, fp16, bf16\}, got fp8e4m3"):
        submit(4, 100, dtype="fp8e4m3")
    with pytest.raises(df.BadArgumentError, match=r"cross_entropy: logits \[.*\) and dlogits \[.*\) overlap; "
                                                   r"dlogits may only be exactly logits"):
        submit(2, 10, dlogits=ffi.cast("char *", x.cdata) + 4)
    h.sync()
