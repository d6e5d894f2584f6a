"""attention forward/backward on each backend against torch scaled_dot_product_attention.

The oracle runs per sequence in fp32 on the same (dtype-rounded) inputs, with K/V heads
expanded by repeat_interleave (Hugging Face's repeat_kv) for GQA, and autograd for dq, dk, dv;
lse against torch.logsumexp of the scaled, masked scores. Tolerances: tests/helpers/tolerances.py."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import dataflow as df
from dtype_rounding import quantize
from tolerances import ATTENTION_TOLERANCES, attention_out_tolerance
from conftest import handle_fixture
from attention_oracle import assert_attention_close, assert_chunks_equal_whole_sequence, offsets, oracle_kv

DTYPES = ("fp32", "bf16", "fp16")
LENGTHS = [1, 7, 33, 64, 5, 130]


h = handle_fixture("h", ("attention", "attention_kv", "attention_bwd_delta", "attention_bwd", "attention_kv_bwd"),
                   streams=2, device_memory="1GiB")


def make_inputs(lengths, hq, hkv, d, dtype, seed):
    """q, k, v, dout as float32 values exact in dtype (standard normal)."""
    rng = np.random.default_rng(seed)
    total = int(sum(lengths))
    return [quantize(rng.standard_normal((total, n, d)), dtype) for n in (hq, hkv, hkv, hq)]


def oracle(q, k, v, dout, cu, scale, causal=True):
    """torch fp32: out, lse (q_heads, tokens), and dq, dk, dv when dout is given."""
    q, k, v = (torch.from_numpy(x).requires_grad_(dout is not None) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    outs, lses = [], []
    for a, b in zip(cu[:-1], cu[1:]):
        qs = q[a:b].transpose(0, 1)
        ks = k[a:b].repeat_interleave(group, dim=1).transpose(0, 1)
        vs = v[a:b].repeat_interleave(group, dim=1).transpose(0, 1)
        outs.append(torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=scale)
                    .transpose(0, 1))
        scores = (qs @ ks.transpose(1, 2)) * scale
        if causal:
            scores = scores.masked_fill(torch.ones(b - a, b - a, dtype=torch.bool).triu(1), -float("inf"))
        lses.append(torch.logsumexp(scores, dim=-1))
    out, lse = torch.cat(outs), torch.cat(lses, dim=1)
    grads = None
    if dout is not None:
        out.backward(torch.from_numpy(dout))
        grads = [x.grad.numpy() for x in (q, k, v)]
    return out.detach().numpy(), lse.detach().numpy(), grads


def run(h, q, k, v, dout, cu, dtype, scale=None, causal=True):
    dev = [h.from_numpy(x, dtype=dtype) for x in (q, k, v)]
    out, lse = df.ops.attention(h, *dev, cu, scale=scale, causal=causal)
    grads = None
    if dout is not None:
        grads = df.ops.attention_bwd(h, h.from_numpy(dout, dtype=dtype), *dev, out, lse, cu, scale=scale,
                                     causal=causal)
    return out, lse, grads


# q_heads / kv_heads ratios 1..8 and head_dims 48, 64, 80, 128, 256
SHAPES = [(8, 8, 64), (8, 4, 48), (8, 2, 80), (8, 1, 128), (6, 3, 64), (6, 2, 48), (7, 7, 80), (5, 1, 64),
          (3, 3, 256)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hq,hkv,d", SHAPES)
def test_attention_fwd_bwd(h, dtype, hq, hkv, d):
    q, k, v, dout = make_inputs(LENGTHS, hq, hkv, d, dtype, seed=hq * 1000 + hkv * 10 + d)
    cu = offsets(LENGTHS)
    want = oracle(q, k, v, dout, cu, 1 / d ** 0.5)
    assert_attention_close(h, run(h, q, k, v, dout, cu, dtype), want, dtype, f"{dtype} {hq}/{hkv} d={d}", v)


def p_rounded_attention(q, k, v, cu, scale, dtype):
    """A numpy model of cuda's tensor-core forward: S and l in fp32, P rounded to dtype before
    P V, the output rounded to dtype (causal)."""
    group = q.shape[1] // k.shape[1]
    out = np.zeros_like(q)
    for a, b in zip(cu[:-1], cu[1:]):
        for head in range(q.shape[1]):
            s = q[a:b, head] @ k[a:b, head // group].T * np.float32(scale)
            s[np.triu(np.ones((b - a, b - a), bool), 1)] = -np.inf
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[a:b, head] = quantize(p, dtype) @ v[a:b, head // group] / p.sum(axis=1, keepdims=True)
    return quantize(out, dtype)


@pytest.mark.parametrize("dtype", ("bf16", "fp16"))
def test_attention_out_tolerance_covers_p_rounded_to_dtype(dtype):
    """The tolerance's P-rounding term against the model above on test_attention_fwd_bwd's
    inputs: every element within it, and (why the term exists) some outside the plain one."""
    outside_plain = 0
    for hq, hkv, d in SHAPES:
        q, k, v, _ = make_inputs(LENGTHS, hq, hkv, d, dtype, seed=hq * 1000 + hkv * 10 + d)
        cu = offsets(LENGTHS)
        got = p_rounded_attention(q, k, v, cu, 1 / d ** 0.5, dtype)
        want = oracle(q, k, v, None, cu, 1 / d ** 0.5)[0]
        np.testing.assert_allclose(got, want, **attention_out_tolerance(dtype, np.abs(v).max(), v.shape[0], True))
        plain = ATTENTION_TOLERANCES[dtype]
        outside_plain += int((np.abs(got - want) > plain["atol"] + plain["rtol"] * np.abs(want)).sum())
    assert outside_plain > 0, "the model never leaves the one-rounding tolerance: is P still rounded?"


@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
def test_attention_not_causal_custom_scale_odd_head_dim(h, dtype):
    """causal=False, an explicit scale, head_dim 20 (not a multiple of 16), a single token."""
    lengths = [70, 1, 9]
    q, k, v, dout = make_inputs(lengths, 4, 2, 20, dtype, seed=5)
    cu = offsets(lengths)
    want = oracle(q, k, v, dout, cu, 0.3, causal=False)
    assert_attention_close(h, run(h, q, k, v, dout, cu, dtype, scale=0.3, causal=False), want, dtype, "non-causal", v)


def test_attention_device_cu_seqlens_and_empty_sequence(h):
    """cu_seqlens given as a device int32 array; an empty sequence in the middle."""
    lengths = [5, 0, 40]
    q, k, v, dout = make_inputs(lengths, 4, 2, 64, "fp32", seed=6)
    cu = offsets(lengths)
    want = oracle(q, k, v, dout, cu, 0.125)
    got = run(h, q, k, v, dout, h.from_numpy(cu), "fp32")
    assert_attention_close(h, got, want, "fp32", "device cu_seqlens", v)


def test_attention_bwd_finite_differences(h):
    """dq, dk, dv against central differences of L = sum(out * R), with L evaluated by the
    forward op in fp32 (accumulated in float64 on the host) at a few coordinates.
    eps = 1e-2: truncation error eps^2 / 6 * |d3L| ~ 2e-5 for these O(1) inputs; rounding
    error ~ 2 * 6e-8 * sum|out * R| / (2 eps) ~ 1e-4 (about 30 terms of size ~1). The
    tolerance 1e-3 + 1e-2 relative is several times both, and far below the gradients (~0.1-1),
    so a wrong formula (a missing scale, a dropped GQA head, a wrong D) fails."""
    lengths, hq, hkv, d = [3, 5], 4, 2, 8
    q, k, v, _ = make_inputs(lengths, hq, hkv, d, "fp32", seed=7)
    cu = offsets(lengths)
    r = np.random.default_rng(8).standard_normal(q.shape).astype(np.float32)

    def loss(q, k, v):
        out, _ = df.ops.attention(h, h.from_numpy(q), h.from_numpy(k), h.from_numpy(v), cu)
        return float(np.sum(out.numpy().astype(np.float64) * r))

    _, _, grads = run(h, q, k, v, r, cu, "fp32")
    rng = np.random.default_rng(9)
    eps = 1e-2
    for which, (x, g) in enumerate(zip((q, k, v), grads)):
        g = g.numpy()
        for _ in range(4):
            at = tuple(int(rng.integers(n)) for n in x.shape)
            args = [q, k, v]
            plus, minus = x.copy(), x.copy()
            plus[at] += eps
            minus[at] -= eps
            args[which] = plus
            lp = loss(*args)
            args[which] = minus
            numeric = (lp - loss(*args)) / (2 * eps)
            assert abs(g[at] - numeric) <= 1e-3 + 1e-2 * abs(numeric), (
                f"{'qkv'[which]}{at}: analytic {g[at]} vs central difference {numeric}")


@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
def test_attention_deterministic_across_threads(dtype):
    """The same bits with 1 and 2 compute threads, forward and backward (GQA: dk, dv sum over
    the group's query heads in a fixed order)."""
    lengths = [200, 3, 90]
    q, k, v, dout = make_inputs(lengths, 8, 2, 64, dtype, seed=10)
    cu = offsets(lengths)
    results = []
    for threads in (1, 2):
        with df.Handle("host", threads=threads) as hh:
            out, lse, grads = run(hh, q, k, v, dout, cu, dtype)
            results.append([x.raw().copy() for x in (out, lse, *grads)])
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), *results):
        assert np.array_equal(a, b), f"{name} differs between 1 and 2 threads"


_SIMD_SCRIPT = """
import hashlib, numpy as np, dataflow as df
h = df.Handle("host")
cu = np.array([0, 1, 8, 41, 105, 110, 240], np.int32)
rng = np.random.default_rng(0)
digest = hashlib.sha256()
for dtype in ("fp32", "bf16", "fp16"):
    for d in (64, 20):
        x = [h.from_numpy(rng.standard_normal((240, m, d)).astype(np.float32), dtype=dtype) for m in (8, 2, 2, 8)]
        out, lse = df.ops.attention(h, *x[:3], cu)
        for a in (out, lse, *df.ops.attention_bwd(h, x[3], *x[:3], out, lse, cu)):
            digest.update(a.raw().tobytes())
print(digest.hexdigest())
"""


@pytest.mark.slow
def test_attention_simd_levels_agree():
    """DATAFLOW_SIMD=avx512 / avx2 / scalar give identical bits: every path does the same fp32
    operations (fma included) in the same order (see backends/host/kernels/attention.h)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(df.__file__)), env.get("PYTHONPATH", "")])
    digests = {}
    for level in ("avx512", "avx2", "scalar"):
        env["DATAFLOW_SIMD"] = level
        out = subprocess.run([sys.executable, "-c", _SIMD_SCRIPT], env=env, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stderr
        digests[level] = out.stdout.strip()
    assert len(set(digests.values())) == 1, digests


def test_attention_garbage_device_cu_seqlens_is_memory_safe(h):
    """Offsets out of range or decreasing, from device memory: no crash, no out-of-bounds
    access; the well-formed leading sequence is still computed right."""
    lengths = [20]
    q, k, v, dout = make_inputs([40], 4, 2, 32, "fp32", seed=11)
    cu = np.array([0, 20, -7, 1 << 30, 3, 2 ** 31 - 1, -(2 ** 31)], np.int32)
    out, lse, grads = run(h, q, k, v, dout, h.from_numpy(cu), "fp32")
    want = oracle(q[:20], k[:20], v[:20], dout[:20], offsets(lengths), 32 ** -0.5)
    np.testing.assert_allclose(out.numpy()[:20], want[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads[0].numpy()[:20], want[2][0], rtol=1e-4, atol=1e-4)


def test_attention_bad_input(h):
    f32 = lambda *shape: h.empty(shape, "fp32")  # noqa: E731
    q, k, cu = f32(10, 6, 64), f32(10, 4, 64), np.array([0, 10])
    with pytest.raises(df.BadArgumentError, match=r"attention: requires num_q_heads % num_kv_heads == 0, got "
                                                  r"num_q_heads = 6, num_kv_heads = 4"):
        df.ops.attention(h, q, k, k, cu)
    with pytest.raises(df.BadArgumentError, match=r"attention: k must be fp32 \(like q\), got bf16"):
        df.ops.attention(h, q, h.empty((10, 2, 64), "bf16"), f32(10, 2, 64), cu)
    with pytest.raises(df.BadArgumentError, match="dtype must be one of"):
        i32 = h.empty((10, 2, 64), "int32")
        df.ops.attention(h, i32, i32, i32, cu)
    with pytest.raises(df.BadArgumentError, match="head_dim"):
        df.ops.attention(h, q, f32(10, 2, 32), f32(10, 2, 32), cu)
    with pytest.raises(df.BadArgumentError, match="head_dim must be <= 256"):
        big = f32(4, 1, 264)
        df.ops.attention(h, big, big, big, np.array([0, 4]))
    kv = f32(10, 2, 64)
    for bad, msg in (([1, 10], r"cu_seqlens\[0\] must be 0, got 1"),
                     ([0, 6, 4, 10], r"cu_seqlens\[2\] = 4 < cu_seqlens\[1\] = 6"),
                     ([0, 4, 9], r"cu_seqlens\[2\] must equal total_tokens = 10, got 9"),
                     ([0.0, 10.0], "integer array")):
        with pytest.raises(df.BadArgumentError, match=msg):
            df.ops.attention(h, q, kv, kv, np.array(bad))
    with pytest.raises(df.BadArgumentError, match=r"attention: lse must have shape \[num_q_heads, total_tokens\] "
                                                  r"with num_q_heads = 6 \(from q\), got \(10, 6\)"):
        df.ops.attention(h, q, kv, kv, cu, lse=f32(10, 6))
    out, lse = df.ops.attention(h, q, kv, kv, cu)
    with pytest.raises(df.BadArgumentError, match="dout must be"):
        df.ops.attention_bwd(h, f32(10, 6, 32), q, kv, kv, out, lse, cu)
    with pytest.raises(df.BadArgumentError, match="workspace_bytes must be >="):
        df.ops.attention_bwd(h, out, q, kv, kv, out, lse, cu, workspace=h.empty((16,), "uint8"))


# ---- attention_kv: separate query and key sequences (KV cache), forward only ----


def run_kv(h, q_lens, k_lens, hq, hkv, d, dtype, seed, causal=True, scale=None):
    rng = np.random.default_rng(seed)
    q = quantize(rng.standard_normal((sum(q_lens), hq, d)), dtype)
    k, v = (quantize(rng.standard_normal((sum(k_lens), hkv, d)), dtype) for _ in range(2))
    cu_q, cu_k = offsets(q_lens), offsets(k_lens)
    out, lse = df.ops.attention_kv(h, *(h.from_numpy(x, dtype=dtype) for x in (q, k, v)), cu_q, cu_k, scale=scale,
                                   causal=causal)
    want = oracle_kv(q, k, v, cu_q, cu_k, d ** -0.5 if scale is None else scale, causal)
    return (out, lse, None), want + (None,), v


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hq,hkv,d", [(8, 2, 64), (6, 3, 48), (5, 1, 80), (4, 4, 128)])
def test_attention_kv_decode_and_chunks(h, dtype, hq, hkv, d):
    """Several sequences with q_len 1 (decode) and q_len > 1 chunks (prefill after a cached
    prefix, chunks longer than a tile) over longer key sequences; GQA ratios 1..5."""
    q_lens, k_lens = [1, 1, 7, 70, 1, 65], [1, 37, 40, 150, 64, 65]
    got, want, v = run_kv(h, q_lens, k_lens, hq, hkv, d, dtype, seed=hq * d)
    assert_attention_close(h, got, want, dtype, f"attention_kv {dtype} {hq}/{hkv} d={d}", v)


def test_attention_kv_equals_attention_when_lengths_match(h):
    """cu_seqlens_k = cu_seqlens_q: the same bits as attention (one kernel)."""
    lengths = [5, 64, 1, 90]
    q, k, v, _ = make_inputs(lengths, 6, 2, 64, "bf16", seed=5)
    dev = [h.from_numpy(x, dtype="bf16") for x in (q, k, v)]
    for causal in (True, False):
        out, lse = df.ops.attention(h, *dev, offsets(lengths), causal=causal)
        out_kv, lse_kv = df.ops.attention_kv(h, *dev, offsets(lengths), offsets(lengths), causal=causal)
        assert np.array_equal(out.numpy(), out_kv.numpy()) and np.array_equal(lse.numpy(), lse_kv.numpy())


def test_attention_kv_not_causal_and_queries_without_keys(h):
    """Full attention over the keys; and causal q_len > k_len: the first q_len - k_len queries
    see no key and get out = 0, lse = -inf (the others as the oracle)."""
    got, want, v = run_kv(h, [3, 9], [20, 4], 4, 2, 32, "fp32", seed=3, causal=False, scale=0.3)
    assert_attention_close(h, got, want, "fp32", "attention_kv not causal", v)
    got, want, _ = run_kv(h, [6, 2], [2, 5], 4, 2, 32, "fp32", seed=4)
    out, lse = got[0].numpy(), got[1].numpy()
    seen = np.array([False] * 4 + [True] * 4)
    assert np.all(out[~seen] == 0) and np.all(lse[:, ~seen] == -np.inf)
    np.testing.assert_allclose(out[seen], want[0][seen], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(lse[:, seen], want[1][:, seen], rtol=0, atol=2e-5)


def test_attention_kv_garbage_device_cu_seqlens_is_memory_safe(h):
    """Out-of-range, decreasing and mismatched device offsets for q and k: no crash, no
    out-of-bounds access; the well-formed leading sequence is still right."""
    rng = np.random.default_rng(9)
    q = rng.standard_normal((30, 4, 32)).astype(np.float32)
    k, v = (rng.standard_normal((50, 2, 32)).astype(np.float32) for _ in range(2))
    cu_q = np.array([0, 3, -7, 1 << 30, 3, 2 ** 31 - 1, 29], np.int32)
    cu_k = np.array([0, 40, 2 ** 31 - 1, -5, 1 << 30, 0, 49], np.int32)
    out, _ = df.ops.attention_kv(h, *(h.from_numpy(x) for x in (q, k, v)), h.from_numpy(cu_q), h.from_numpy(cu_k))
    want, _ = oracle_kv(q[:3], k[:40], v[:40], [0, 3], [0, 40], 32 ** -0.5)
    np.testing.assert_allclose(out.numpy()[:3], want, rtol=1e-4, atol=1e-5)


def test_attention_kv_bad_input(h):
    f32 = lambda *shape: h.empty(shape, "fp32")  # noqa: E731
    q, kv = f32(3, 4, 32), f32(10, 2, 32)
    with pytest.raises(df.BadArgumentError, match="same length"):
        df.ops.attention_kv(h, q, kv, kv, np.array([0, 3]), np.array([0, 4, 10]))
    with pytest.raises(df.BadArgumentError, match=r"cu_seqlens_k\[1\] must equal total_k = 10"):
        df.ops.attention_kv(h, q, kv, kv, np.array([0, 3]), np.array([0, 9]))
    with pytest.raises(df.BadArgumentError, match="head_dim"):
        df.ops.attention_kv(h, q, f32(10, 2, 16), f32(10, 2, 16), np.array([0, 3]), np.array([0, 10]))
    with pytest.raises(df.BadArgumentError, match="attention_kv: requires num_q_heads % num_kv_heads == 0"):
        df.ops.attention_kv(h, q, f32(10, 3, 32), f32(10, 3, 32), np.array([0, 3]), np.array([0, 10]))


# ---- attention_kv_bwd: the backward over a K/V context, dK/dV accumulated in fp32 ----

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hq,hkv,d", [(8, 2, 64), (6, 3, 48), (4, 4, 128), (3, 1, 80)])
def test_attention_kv_bwd(h, dtype, hq, hkv, d):
    """Chunks (q_len < k_len, longer than a tile) and decode rows over longer key sequences, and
    one sequence with q_len = k_len; dk, dv start from given fp32 values and come back as those
    plus torch autograd's gradients."""
    q_lens, k_lens = [1, 7, 70, 65, 30], [37, 40, 150, 65, 30]
    rng = np.random.default_rng(hq * d + 1)
    q, dout = (quantize(rng.standard_normal((sum(q_lens), hq, d)), dtype) for _ in range(2))
    k, v = (quantize(rng.standard_normal((sum(k_lens), hkv, d)), dtype) for _ in range(2))
    dk0, dv0 = (rng.standard_normal((sum(k_lens), hkv, d)).astype(np.float32) for _ in range(2))
    cu_q, cu_k = offsets(q_lens), offsets(k_lens)
    dev = [h.from_numpy(x, dtype=dtype) for x in (q, k, v)]
    out, lse = df.ops.attention_kv(h, *dev, cu_q, cu_k)
    dq, dk, dv = df.ops.attention_kv_bwd(h, h.from_numpy(dout, dtype=dtype), *dev, out, lse, cu_q, cu_k,
                                         dk=h.from_numpy(dk0), dv=h.from_numpy(dv0))
    w_out, w_lse, (w_dq, w_dk, w_dv) = oracle_kv(q, k, v, cu_q, cu_k, d ** -0.5, dout=dout)
    assert dk.dtype == dv.dtype == "fp32"
    got = (out, lse, [dq, h.from_numpy(dk.numpy() - dk0), h.from_numpy(dv.numpy() - dv0)])
    assert_attention_close(h, got, (w_out, w_lse, [w_dq, w_dk, w_dv]), dtype, f"attention_kv_bwd {dtype} {hq}/{hkv} d={d}",
                           v)


@pytest.mark.parametrize("dtype", ("fp32", "bf16"))
def test_attention_kv_bwd_one_sequence(h, dtype):
    """One sequence, one kv head: the per-block items (not the per-sequence ones) over a
    bottom-right offset, against torch autograd."""
    rng = np.random.default_rng(12)
    q, dout = (quantize(rng.standard_normal((70, 4, 64)), dtype) for _ in range(2))
    k, v = (quantize(rng.standard_normal((150, 1, 64)), dtype) for _ in range(2))
    dev = [h.from_numpy(x, dtype=dtype) for x in (q, k, v)]
    out, lse = df.ops.attention_kv(h, *dev, [0, 70], [0, 150])
    grads = df.ops.attention_kv_bwd(h, h.from_numpy(dout, dtype=dtype), *dev, out, lse, [0, 70], [0, 150])
    want = oracle_kv(q, k, v, [0, 70], [0, 150], 64 ** -0.5, dout=dout)
    assert_attention_close(h, (out, lse, grads), want, dtype, f"attention_kv_bwd one sequence {dtype}", v)


def test_attention_kv_bwd_not_causal(h):
    q_lens, k_lens = [3, 9], [20, 4]
    rng = np.random.default_rng(8)
    q, dout = (rng.standard_normal((12, 4, 32)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((24, 2, 32)).astype(np.float32) for _ in range(2))
    dev = [h.from_numpy(x) for x in (q, k, v)]
    out, lse = df.ops.attention_kv(h, *dev, offsets(q_lens), offsets(k_lens), causal=False, scale=0.3)
    grads = df.ops.attention_kv_bwd(h, h.from_numpy(dout), *dev, out, lse, offsets(q_lens), offsets(k_lens),
                                    causal=False, scale=0.3)
    want = oracle_kv(q, k, v, offsets(q_lens), offsets(k_lens), 0.3, causal=False, dout=dout)
    assert_attention_close(h, (out, lse, grads), want, "fp32", "attention_kv_bwd not causal", v)


@pytest.mark.slow
def test_attention_kv_bwd_equals_attention_bwd_when_lengths_match(h):
    """cu_seqlens_k = cu_seqlens_q and zero dk, dv (fp32): the same bits as attention_bwd (one
    kernel), on the fused path (4 sequences x 2 kv heads) and the per-block one (1 x 1)."""
    for lengths, hq, hkv in (([5, 64, 1, 90], 6, 2), ([150], 3, 1)):
        q, k, v, dout = make_inputs(lengths, hq, hkv, 64, "fp32", seed=6)
        dev = [h.from_numpy(x) for x in (q, k, v, dout)]
        cu = offsets(lengths)
        out, lse = df.ops.attention(h, *dev[:3], cu)
        want = df.ops.attention_bwd(h, dev[3], *dev[:3], out, lse, cu)
        got = df.ops.attention_kv_bwd(h, dev[3], *dev[:3], out, lse, cu, cu)
        for g, w in zip(got, want):
            assert np.array_equal(g.numpy(), w.numpy())


@pytest.mark.slow
def test_attention_kv_bwd_chunks_equal_whole_sequence(h):
    """A 150-token sequence in chunks of 64, 50, 36: each chunk's forward over the K/V of the
    chunks before it and itself, the backward in reverse chunk order adding into one fp32
    dK/dV context; dq, dk, dv equal attention_bwd over the whole sequence within 1e-5."""
    chunks = [64, 50, 36]
    q, k, v, dout = make_inputs([sum(chunks)], 6, 2, 64, "fp32", seed=11)
    assert_chunks_equal_whole_sequence(h, q, k, v, dout, chunks)


def test_attention_kv_bwd_bad_input(h):
    f32 = lambda *shape, dtype="fp32": h.empty(shape, dtype)  # noqa: E731
    q, kv = f32(3, 4, 32), f32(10, 2, 32)
    out, lse = df.ops.attention_kv(h, q, kv, kv, [0, 3], [0, 10])
    with pytest.raises(df.BadArgumentError, match="dk must be fp32"):
        df.ops.attention_kv_bwd(h, out, q, kv, kv, out, lse, [0, 3], [0, 10], dk=f32(10, 2, 32, dtype="bf16"))
    with pytest.raises(df.BadArgumentError, match="same length"):
        df.ops.attention_kv_bwd(h, out, q, kv, kv, out, lse, [0, 3], [0, 4, 10])
    with pytest.raises(df.BadArgumentError, match="workspace_bytes"):
        df.ops.attention_kv_bwd(h, out, q, kv, kv, out, lse, [0, 3], [0, 10], workspace=h.empty((16,), "uint8"))
