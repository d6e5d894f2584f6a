"""Lavapipe's loop bound (backends/vulkan/src/vulkan_backend.h): Mesa's llvmpipe stops the loops
of a kernel invocation after 65535 iterations in all, silently. Each case is an op with a shape
just inside what the vulkan backend accepts there, which must compute right (numpy), and one
past where lavapipe stops, which must compute right or, on llvmpipe only, raise an
UnsupportedError naming the op, the arguments, the count, the bound and the driver: never
wrong numbers."""
import numpy as np
import pytest

import dataflow as df
from conftest import backend_unavailable, missing_op

OPS = ["embedding_bwd_w", "cross_entropy", "matmul", "attention_kv", "rms_norm", "attention_bwd", "attention_kv_bwd",
       "paged_attention_partial", "paged_attention_combine", "moe_router_stats", "moe_combine_bwd"]
pytestmark = pytest.mark.skipif(bool(backend_unavailable("vulkan") or missing_op("vulkan", OPS)),
                                reason=str(backend_unavailable("vulkan") or missing_op("vulkan", OPS)))


@pytest.fixture(scope="module")
def h():
    with df.Handle("vulkan", streams=1) as handle:
        yield handle


def llvmpipe():
    import dataflow.vulkan
    return dataflow.vulkan.list_devices()[0]["name"].startswith("llvmpipe")


def embedding_bwd_w(h, n):
    """n tokens of ones into one row: the row must count them all (fp32 counts exactly)."""
    ids, d_out = np.zeros(n, np.int32), np.ones((n, 1), np.float32)
    return df.ops.embedding_bwd_w(h, h.from_numpy(ids), h.from_numpy(d_out), vocab=1).numpy()[0, 0] == n


def cross_entropy(h, vocab):
    """One row whose label is its last logit, the largest."""
    x = np.random.default_rng(1).standard_normal((1, vocab)).astype(np.float32)
    x[0, -1] = 8.0
    loss, dlogits = df.ops.cross_entropy(h, h.from_numpy(x), h.from_numpy(np.array([vocab - 1], np.int32)))
    xd = x.astype(np.float64)
    lse = xd.max() + np.log(np.exp(xd - xd.max()).sum())
    want = np.exp(xd - lse)
    want[0, -1] -= 1
    return abs(loss.numpy()[0] - (lse - xd[0, -1])) < 1e-4 * abs(lse) and np.abs(dlogits.numpy() - want).max() < 1e-6


def matmul(h, k):
    """(1 x K) ones @ (K x 1) ones = K exactly."""
    a, b = np.ones((1, k), np.float32), np.ones((k, 1), np.float32)
    return df.ops.matmul(h, h.from_numpy(a), h.from_numpy(b)).numpy()[0, 0] == k


def attention_kv(h, keys, d=128):
    """One query over `keys` keys (head_dim d), the last of which dominates the softmax."""
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 1, d)).astype(np.float32)
    k = (0.1 * rng.standard_normal((keys, 1, d))).astype(np.float32)
    k[-1, 0] = q[0, 0]
    v = rng.standard_normal((keys, 1, d)).astype(np.float32)
    out, _ = df.ops.attention_kv(h, h.from_numpy(q), h.from_numpy(k), h.from_numpy(v), np.array([0, 1], np.int32),
                                 np.array([0, keys], np.int32), causal=False)
    s = k[:, 0].astype(np.float64) @ q[0, 0].astype(np.float64) / d ** 0.5
    p = np.exp(s - s.max())
    return np.abs(out.numpy()[0, 0] - (p / p.sum()) @ v[:, 0]).max() < 1e-4


def attention_bwd(h, tokens, group=82, d=256):
    """One causal sequence of `tokens`, `group` query heads over one kv head: a key's gradients
    loop over every query of every head of its group, over d twice per query. out and lse, the
    backward's inputs, from numpy."""
    rng = np.random.default_rng(5)
    q, do = (rng.standard_normal((tokens, group, d)) for _ in range(2))
    k, v = (rng.standard_normal((tokens, d)) for _ in range(2))
    s = np.where(np.tri(tokens, dtype=bool), np.einsum("ihd,jd->hij", q, k) / d ** 0.5, -np.inf)
    lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    p = np.exp(s - lse[..., None])
    out = np.einsum("hij,jd->ihd", p, v)
    dp = np.einsum("ihd,jd->hij", do, v)
    ds = p * (dp - np.einsum("hij,hij->hi", p, dp)[..., None]) / d ** 0.5
    want = (np.einsum("hij,jd->ihd", ds, k), np.einsum("hij,ihd->jd", ds, q), np.einsum("hij,ihd->jd", p, do))
    dev = [h.from_numpy(a.astype(np.float32)) for a in (do, q, k[:, None], v[:, None], out, lse)]
    got = df.ops.attention_bwd(h, *dev, np.array([0, tokens], np.int32))
    return all(np.abs(g.numpy().reshape(w.shape) - w).max() < 1e-4 * np.abs(w).max() for g, w in zip(got, want))


def attention_kv_bwd(h, keys, d=256):
    """One query over `keys` keys (not causal, one head): the query's gradients loop over every
    key, over d twice per key; dk and dv add into fp32 arrays already holding ones. out and lse,
    the backward's inputs, from numpy."""
    rng = np.random.default_rng(6)
    q, do = (rng.standard_normal(d) for _ in range(2))
    k, v = (rng.standard_normal((keys, d)) for _ in range(2))
    s = k @ q / d ** 0.5
    lse = np.log(np.exp(s - s.max()).sum()) + s.max()
    p = np.exp(s - lse)
    dp = v @ do
    ds = p * (dp - p @ dp) / d ** 0.5
    want = (ds @ k, 1 + np.outer(ds, q), 1 + np.outer(p, do))
    dev = [h.from_numpy(a.astype(np.float32).reshape(shape)) for a, shape in
           ((do, (1, 1, d)), (q, (1, 1, d)), (k, (keys, 1, d)), (v, (keys, 1, d)), (p @ v, (1, 1, d)), (lse, (1, 1)))]
    ones = [h.from_numpy(np.ones((keys, 1, d), np.float32)) for _ in range(2)]
    got = df.ops.attention_kv_bwd(h, *dev, np.array([0, 1], np.int32), np.array([0, keys], np.int32), causal=False,
                                  dk=ones[0], dv=ones[1])
    return all(np.abs(g.numpy().reshape(w.shape) - w).max() < 1e-4 * np.abs(w).max() for g, w in zip(got, want))


def paged_attention(h, keys, d=128, page=64):
    """attention_kv's case over pages (shuffled) with one split of all the keys."""
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 1, d)).astype(np.float32)
    pages = -(-keys // page)
    k = (0.1 * rng.standard_normal((pages * page, 1, d))).astype(np.float32)
    k[keys - 1, 0] = q[0, 0]
    v = rng.standard_normal((pages * page, 1, d)).astype(np.float32)
    table = rng.permutation(pages).astype(np.int32)
    kp, vp = np.empty((pages, page, 1, d), np.float32), np.empty((pages, page, 1, d), np.float32)
    kp[table], vp[table] = k.reshape(pages, page, 1, d), v.reshape(pages, page, 1, d)
    out, _ = df.ops.paged_attention(h, h.from_numpy(q), h.from_numpy(kp), h.from_numpy(vp), table[None],
                                    np.array([keys], np.int32), np.array([0, 1], np.int32),
                                    split_size=-(-keys // 64) * 64)
    s = k[:keys, 0].astype(np.float64) @ q[0, 0].astype(np.float64) / d ** 0.5
    p = np.exp(s - s.max())
    return np.abs(out.numpy()[0, 0] - (p / p.sum()) @ v[:keys, 0]).max() < 1e-4


def rms_norm(h, hidden):
    """One row whose last element is the largest."""
    x = np.random.default_rng(4).standard_normal((1, hidden)).astype(np.float32)
    x[0, -1] = 300.0
    y, _ = df.ops.rms_norm(h, h.from_numpy(x), h.from_numpy(np.ones(hidden, np.float32)))
    xd = x.astype(np.float64)
    want = xd / np.sqrt((xd ** 2).mean() + 1e-6)
    return np.abs(y.numpy() - want).max() < 1e-5 * np.abs(want).max()


def moe_router_stats(h, tokens):
    """tokens routed to the one expert with probability 1: it must count them all, and sum them."""
    stats = df.ops.moe_router_stats(h, h.from_numpy(np.ones((tokens, 1), np.float32)),
                                    h.from_numpy(np.zeros((tokens, 1), np.int32)), h.zeros((2, 1), "fp32"))
    return (stats.numpy() == tokens).all()


def moe_combine_bwd(h, hidden):
    """One token, one slot, ones: the weight's gradient is hidden exactly."""
    ones = h.from_numpy(np.ones((1, hidden), np.float32))
    d_y_perm, d_w = df.ops.moe_combine_bwd(h, ones, ones, h.from_numpy(np.zeros((1, 1), np.int32)),
                                           h.from_numpy(np.ones((1, 1), np.float32)))
    return d_w.numpy()[0, 0] == hidden and (d_y_perm.numpy() == 1).all()


# (op, check, the largest shape vulkan accepts on llvmpipe, a shape past where llvmpipe stops, the
# arguments the error names, as a regular expression). matmul's "inside" is past the K where
# llvmpipe stopped before matmul.comp unrolled its inner loops (174768), as far as a test can
# afford (a 64 x 64 tile per 16 of K); attention_kv's is past the 10624 keys where it stopped
# before the forward ran its inner loops 8 iterations a pass.
CASES = [
    ("embedding_bwd_w", embedding_bwd_w, 65531, 65536, "num_tokens = 65536"),
    ("cross_entropy", cross_entropy, 1047424, 1048064, "vocab = 1048064, tokens = 1"),
    ("matmul", matmul, 176000, 1048576, "K = 1048576"),
    ("attention_kv", attention_kv, 69824, 100032,
     r"total_k = 100032, head_dim = 128, num_seqs = 1, total_q \* num_q_heads = 1"),
    ("rms_norm", rms_norm, 524042, 560000, "hidden = 560000, rows = 1"),
    ("attention_bwd", attention_bwd, 64, 65,
     "total_tokens = 65, head_dim = 256, num_q_heads / num_kv_heads = 82, num_seqs = 1"),
    ("paged_attention_partial", paged_attention, 69824, 100032,
     r"split_size = 100032, head_dim = 128, batch = 1, splits \* total_q \* num_q_heads = 1"),
    ("attention_kv_bwd", attention_kv_bwd, 5312, 8192,
     "total_q = 1, total_k = 8192, head_dim = 256, num_q_heads / num_kv_heads = 1, num_seqs = 1"),
    ("moe_router_stats", moe_router_stats, 32765, 32768, "tokens = 32768, top_k = 1"),
    ("moe_combine_bwd", moe_combine_bwd, 65531, 65536, r"hidden = 65536, tokens \* top_k = 1"),
]


@pytest.mark.slow
@pytest.mark.parametrize("op, check, inside, past, what", CASES, ids=[c[0] for c in CASES])
def test_shape_inside_the_bound_computes(h, op, check, inside, past, what):
    assert check(h, inside)


@pytest.mark.slow
@pytest.mark.parametrize("op, check, inside, past, what", CASES, ids=[c[0] for c in CASES])
def test_shape_past_the_bound_is_right_or_refused(h, op, check, inside, past, what):
    if not llvmpipe():
        assert check(h, past)  # other drivers have no such bound
        return
    message = (rf"(^|: ){op} \(vulkan\): {what} needs \d+ loop iterations in one kernel invocation, more than "
               r"the 65535 that this device's driver runs \(llvmpipe .*LP_MAX_TGSI")
    with pytest.raises(df.UnsupportedError, match=message):
        check(h, past)

