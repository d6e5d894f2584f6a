"""Sliding-window attention (Mistral's: query i sees keys i - window < j <= i) on each backend:
attention, attention_bwd, attention_kv and attention_kv_bwd against torch SDPA with an explicit
boolean mask and autograd, in fp32 on the same (dtype-rounded) inputs. Tolerances:
tests/helpers/tolerances.py, through test_attention's assert_attention_close."""
import numpy as np
import pytest

import dataflow as df
from conftest import handle_fixture
from attention_oracle import assert_attention_close, assert_chunks_equal_whole_sequence, offsets, oracle_kv
from tolerances import ATTENTION_TOLERANCES
from dtype_rounding import quantize

h = handle_fixture("h", ("attention", "attention_kv", "attention_bwd_delta", "attention_bwd", "attention_kv_bwd"),
                   streams=2, device_memory="1GiB")


def oracle(q, k, v, cu_q, cu_k, scale, window, dout=None):
    """test_attention's oracle_kv with the window in its mask: out, lse, (dq, dk, dv)."""
    return oracle_kv(q, k, v, cu_q, cu_k, scale, dout=dout, window=window) + (() if dout is not None else (None,))


def inputs(q_tokens, k_tokens, hq, hkv, d, dtype, seed):
    rng = np.random.default_rng(seed)
    q, dout = (quantize(rng.standard_normal((q_tokens, hq, d)), dtype) for _ in range(2))
    k, v = (quantize(rng.standard_normal((k_tokens, hkv, d)), dtype) for _ in range(2))
    return q, k, v, dout


def assert_window_close(h, got, want, dtype, what, v):
    """test_attention's comparison; the gradients' absolute floor scales with the largest of the
    three (with a window of 1 each query sees only itself: dq and dk are 0 up to rounding)."""
    assert_attention_close(h, got[:2] + (None,), want[:2] + (None,), dtype, what, v)
    tol = ATTENTION_TOLERANCES[dtype]
    floor = max(float(np.abs(w).max()) for w in want[2])
    for name, g, w in zip(("dq", "dk", "dv"), got[2], want[2]):
        np.testing.assert_allclose(g.numpy().astype(np.float32), w, rtol=tol["grad_rtol"],
                                   atol=tol["grad_atol"] * floor, err_msg=f"{what}: {name}")


LENGTHS = [1, 7, 33, 130, 5, 70]  # ragged, odd, one longer than two 64-key tiles


@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
@pytest.mark.parametrize("window", [1, 5, 64, 100, 500])
@pytest.mark.parametrize("hq,hkv,d", [(6, 2, 48), (4, 4, 64), (5, 1, 80)])
def test_attention_window_fwd_bwd(h, dtype, window, hq, hkv, d):
    """attention and attention_bwd over ragged packed sequences; windows of 1 (each query sees
    itself), smaller than a tile, one tile, across tiles, longer than every sequence."""
    cu = offsets(LENGTHS)
    q, k, v, dout = inputs(cu[-1], cu[-1], hq, hkv, d, dtype, seed=window * 7 + hq)
    dev = [h.from_numpy(x, dtype=dtype) for x in (q, k, v)]
    out, lse = df.ops.attention(h, *dev, cu, window=window)
    grads = df.ops.attention_bwd(h, h.from_numpy(dout, dtype=dtype), *dev, out, lse, cu, window=window)
    want = oracle(q, k, v, cu, cu, d ** -0.5, window, dout)
    assert_window_close(h, (out, lse, grads), want, dtype, f"window {window} {dtype} {hq}/{hkv} d={d}", v)


def test_attention_window_longer_than_sequence_is_causal(h):
    """A window no sequence reaches gives plain causal attention's bits."""
    cu = offsets(LENGTHS)
    q, k, v, dout = inputs(cu[-1], cu[-1], 4, 2, 64, "fp32", seed=3)
    dev = [h.from_numpy(x) for x in (q, k, v)]
    a = df.ops.attention(h, *dev, cu, window=131)
    b = df.ops.attention(h, *dev, cu)
    assert all(np.array_equal(x.numpy(), y.numpy()) for x, y in zip(a, b))
    ga = df.ops.attention_bwd(h, h.from_numpy(dout), *dev, *a, cu, window=131)
    gb = df.ops.attention_bwd(h, h.from_numpy(dout), *dev, *b, cu)
    assert all(np.array_equal(x.numpy(), y.numpy()) for x, y in zip(ga, gb))


@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
@pytest.mark.parametrize("window", [1, 9, 64, 90])
def test_attention_kv_window_fwd_bwd(h, dtype, window):
    """attention_kv and attention_kv_bwd: decode rows, chunks over longer contexts (the window
    reaching back into earlier chunks' keys), a sequence with q_len = k_len, GQA; dk, dv
    accumulate onto given fp32 values."""
    q_lens, k_lens = [1, 7, 70, 65, 30, 1], [37, 40, 150, 65, 30, 200]
    cu_q, cu_k = offsets(q_lens), offsets(k_lens)
    q, k, v, dout = inputs(cu_q[-1], cu_k[-1], 6, 2, 48, dtype, seed=window)
    rng = np.random.default_rng(window + 1)
    dk0, dv0 = (rng.standard_normal(k.shape).astype(np.float32) for _ in range(2))
    dev = [h.from_numpy(x, dtype=dtype) for x in (q, k, v)]
    out, lse = df.ops.attention_kv(h, *dev, cu_q, cu_k, window=window)
    dq, dk, dv = df.ops.attention_kv_bwd(h, h.from_numpy(dout, dtype=dtype), *dev, out, lse, cu_q, cu_k,
                                         window=window, dk=h.from_numpy(dk0), dv=h.from_numpy(dv0))
    want = oracle(q, k, v, cu_q, cu_k, 48 ** -0.5, window, dout)
    got = (out, lse, [dq, h.from_numpy(dk.numpy() - dk0), h.from_numpy(dv.numpy() - dv0)])
    assert_window_close(h, got, want, dtype, f"attention_kv window {window} {dtype}", v)


@pytest.mark.parametrize("window", [1, 20, 70])
def test_attention_kv_window_chunks_equal_whole_sequence(h, window):
    """A 150-token sequence in chunks of 64, 50, 36, each over the K/V of the chunks before it
    and itself, the backward in reverse adding into one fp32 dK/dV context: equal to windowed
    attention over the whole sequence (the window crosses chunk boundaries)."""
    chunks = [64, 50, 36]
    q, k, v, dout = inputs(sum(chunks), sum(chunks), 6, 2, 64, "fp32", seed=11)
    assert_chunks_equal_whole_sequence(h, q, k, v, dout, chunks, window)


@pytest.mark.parametrize("lengths,hq,hkv", [([5, 64, 1, 190], 6, 2), ([300], 3, 1)])
def test_attention_window_skips_key_tiles_out_of_reach(h, lengths, hq, hkv):
    """The point of a window is less work: key tiles wholly before every query's window are not
    read. NaN in the first 64 keys and values of the longest sequence stays out of the outputs
    of queries more than 128 tokens later (and of the gradients of keys that far on), which
    equal the oracle's on the clean inputs; masking alone would read NaN * 0 = NaN."""
    window, d = 10, 32
    cu = offsets(lengths)
    q, k, v, dout = inputs(cu[-1], cu[-1], hq, hkv, d, "fp32", seed=2)
    want = oracle(q, k, v, cu, cu, d ** -0.5, window, dout)
    start = cu[-2]
    k[start:start + 64], v[start:start + 64] = np.nan, np.nan
    dev = [h.from_numpy(x) for x in (q, k, v)]
    out, lse = df.ops.attention(h, *dev, cu, window=window)
    dq, dk, dv = df.ops.attention_bwd(h, h.from_numpy(dout), *dev, out, lse, cu, window=window)
    far = slice(start + 192, cu[-1])
    np.testing.assert_allclose(out.numpy()[far], want[0][far], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(lse.numpy()[:, far], want[1][:, far], rtol=0, atol=2e-5)
    for name, g, w in zip(("dq", "dk", "dv"), (dq, dk, dv), want[2]):
        np.testing.assert_allclose(g.numpy()[far], w[far], rtol=1e-4, atol=1e-4, err_msg=name)


def test_attention_window_bad_input(h):
    q, kv = h.empty((10, 4, 32), "fp32"), h.empty((10, 2, 32), "fp32")
    for bad in (-1, 2.5, True, "4"):
        with pytest.raises(df.BadArgumentError, match="window must be an int >= 0"):
            df.ops.attention(h, q, kv, kv, [0, 10], window=bad)
    with pytest.raises(df.BadArgumentError, match="needs causal=True"):
        df.ops.attention_kv(h, q, kv, kv, [0, 10], [0, 10], causal=False, window=4)
    out, lse = df.ops.attention(h, q, kv, kv, [0, 10], window=3)
    with pytest.raises(df.BadArgumentError, match="attention_bwd: window must be an int >= 0"):
        df.ops.attention_bwd(h, out, q, kv, kv, out, lse, [0, 10], window=-2)
    with pytest.raises(df.BadArgumentError, match="attention_kv_bwd: window 4 needs causal"):
        df.ops.attention_kv_bwd(h, out, q, kv, kv, out, lse, [0, 10], [0, 10], causal=False, window=4)


def test_attention_window_checked_in_c(h):
    """The C signature refuses what the Python check would, for callers that skip it."""
    from dataflow._ffi import opslib
    from dataflow.errors import check
    q, kv = h.empty((10, 4, 32), "fp32"), h.empty((10, 2, 32), "fp32")
    out, lse = df.ops.attention(h, q, kv, kv, [0, 10])
    ws = h.empty((4 * 10 * 4,), "uint8")
    cu = h.from_numpy(np.array([0, 10], np.int32))
    for causal, window, msg in ((1, -1, "window must be >= 0, got -1"),
                                (0, 5, r"requires window == 0 \|\| causal")):
        status = opslib.dataflow_submit_attention_bwd(
            h._ptr(), 0, df.dtypes.enum("fp32"), out.cdata, q.cdata, kv.cdata, kv.cdata, out.cdata, lse.cdata,
            cu.cdata, q.cdata, kv.cdata, kv.cdata, ws.cdata, ws.nbytes, 10, 1, 4, 2, 32, 0.5, causal, window)
        with pytest.raises(df.BadArgumentError, match=msg):
            check(status)


@pytest.mark.parametrize("lengths,hkv", [([200, 3, 90], 2), ([260], 1)])  # the fused and the per-block backward
def test_attention_window_deterministic_and_kv_equal(lengths, hkv):
    """With a window: the same bits with 1 and 2 host threads, and attention_kv / attention_kv_bwd
    over cu_seqlens_k = cu_seqlens_q give attention's and attention_bwd's bits (one kernel)."""
    cu = offsets(lengths)
    q, k, v, dout = inputs(cu[-1], cu[-1], 4, hkv, 64, "bf16", seed=21)
    results = []
    for threads in (1, 2):
        with df.Handle("host", threads=threads) as hh:
            dev = [hh.from_numpy(x, dtype="bf16") for x in (q, k, v, dout)]
            out, lse = df.ops.attention(hh, *dev[:3], cu, window=70)
            grads = df.ops.attention_bwd(hh, dev[3], *dev[:3], out, lse, cu, window=70)
            kv_out, kv_lse = df.ops.attention_kv(hh, *dev[:3], cu, cu, window=70)
            kv_grads = df.ops.attention_kv_bwd(hh, dev[3], *dev[:3], out, lse, cu, cu, window=70)
            assert np.array_equal(out.raw(), kv_out.raw()) and np.array_equal(lse.numpy(), kv_lse.numpy())
            assert np.array_equal(grads[0].raw(), kv_grads[0].raw())
            for g, kv_g in zip(grads[1:], kv_grads[1:]):  # kv_bwd's dk, dv: the same fp32 sums, unrounded
                assert np.array_equal(g.numpy(), quantize(kv_g.numpy(), "bf16"))
            results.append([x.raw().copy() for x in (out, lse, *grads)])
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), *results):
        assert np.array_equal(a, b), f"{name} differs between 1 and 2 threads"
