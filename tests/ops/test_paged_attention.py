"""paged_attention (flash-decoding over a paged KV cache) and paged_kv_write on each backend,
against a torch fp32 oracle run on each sequence's keys gathered from its pages, and against
attention_kv over the same keys stored contiguously (the same bits when a sequence fits one
split). Tolerances: tests/helpers/tolerances.py (attention's)."""
import numpy as np
import pytest
import torch

import dataflow as df
from conftest import handle_fixture
from dtype_rounding import quantize
from tolerances import ATTENTION_TOLERANCES, attention_out_tolerance

h = handle_fixture("h", ("paged_attention_partial", "paged_attention_combine", "paged_kv_write", "attention_kv"),
                   streams=1, device_memory="512MiB")


def paged_case(kv_lens, q_lens, hq, hkv, d, page_size, dtype, seed, spare_pages=3):
    """Pools with each sequence's keys in shuffled pages; returns the pieces and the contiguous K/V."""
    rng = np.random.default_rng(seed)
    pages_of = [-(-n // page_size) for n in kv_lens]
    num_pages = sum(pages_of) + spare_pages
    max_pages = max(pages_of) + 1
    perm = rng.permutation(num_pages)
    table = np.full((len(kv_lens), max_pages), -1, np.int32)  # unused entries are never read
    k_pool = quantize(rng.standard_normal((num_pages, page_size, hkv, d)), dtype)
    v_pool = quantize(rng.standard_normal((num_pages, page_size, hkv, d)), dtype)
    at = 0
    for b, n in enumerate(pages_of):
        table[b, :n] = perm[at:at + n]
        at += n
    k_seq = [k_pool[table[b, :pages_of[b]]].reshape(-1, hkv, d)[:n] for b, n in enumerate(kv_lens)]
    v_seq = [v_pool[table[b, :pages_of[b]]].reshape(-1, hkv, d)[:n] for b, n in enumerate(kv_lens)]
    q = quantize(rng.standard_normal((sum(q_lens), hq, d)), dtype)
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    return q, k_pool, v_pool, table, np.array(kv_lens, np.int32), cu, k_seq, v_seq


def oracle(q, k_seq, v_seq, cu, scale):
    """torch fp32 per sequence: bottom-right causal attention, GQA by repeat_interleave."""
    outs, lses = [], []
    for b, (a, e) in enumerate(zip(cu[:-1], cu[1:])):
        qs = torch.from_numpy(q[a:e]).transpose(0, 1)
        group = qs.shape[0] // k_seq[b].shape[1]
        ks = torch.from_numpy(k_seq[b]).repeat_interleave(group, dim=1).transpose(0, 1)
        vs = torch.from_numpy(v_seq[b]).repeat_interleave(group, dim=1).transpose(0, 1)
        n_q, n_k = e - a, ks.shape[1]
        s = (qs @ ks.transpose(1, 2)) * scale
        s = s.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool).triu(n_k - n_q + 1), -float("inf"))
        outs.append((torch.softmax(s, -1) @ vs).transpose(0, 1))
        lses.append(torch.logsumexp(s, -1))
    return torch.cat(outs).numpy(), torch.cat(lses, 1).numpy()


CASES = [  # kv_lens, q_lens, hq, hkv, d, page_size, split_size
    ([1], [1], 4, 4, 16, 16, 64),                     # one key, one page
    ([37, 5, 200, 64], [1, 1, 1, 1], 8, 2, 32, 16, 64),  # ragged decode, GQA 4, many pages and splits
    ([130, 9, 77], [3, 9, 2], 6, 3, 24, 7, 128),      # a few new tokens each, page_size not dividing
    ([300, 1], [1, 1], 8, 1, 64, 32, 64),            # MQA, long context in 5 splits
    ([70, 20], [70, 4], 2, 2, 8, 5, 64),             # a prefill chunk (70 queries x 2 heads > 64 rows)
]


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_paged_attention_matches_torch(h, case, dtype):
    kv_lens, q_lens, hq, hkv, d, page_size, split_size = CASES[case]
    q, kp, vp, table, lens, cu, k_seq, v_seq = paged_case(kv_lens, q_lens, hq, hkv, d, page_size, dtype, seed=case)
    scale = 1.0 / np.sqrt(d)
    out, lse = df.ops.paged_attention(h, h.from_numpy(q, dtype=dtype), h.from_numpy(kp, dtype=dtype),
                                      h.from_numpy(vp, dtype=dtype), table, lens, cu, split_size=split_size)
    want_out, want_lse = oracle(q, k_seq, v_seq, cu, scale)
    tol = ATTENTION_TOLERANCES[dtype]
    out_tol = attention_out_tolerance(dtype, False, max(kv_lens), np.abs(vp).max())  # P stays fp32 everywhere
    np.testing.assert_allclose(out.numpy().astype(np.float32), want_out, **out_tol)
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=0, atol=tol["lse_atol"])


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_one_split_gives_attention_kv_bits_and_batch_does_not_matter(h, dtype):
    """Each sequence alone equals it in a batch with others bit for bit, so greedy decoding cannot
    depend on the batch; and attention_kv over its contiguous keys, bit for bit on host and vulkan
    (keys <= split_size: the same tiles), within tolerance on cuda (other kernels)."""
    kv_lens, q_lens = [45, 130, 7], [1, 2, 1]
    q, kp, vp, table, lens, cu, k_seq, v_seq = paged_case(kv_lens, q_lens, 8, 2, 32, 16, dtype, seed=7)
    dev = lambda x: h.from_numpy(x, dtype=dtype)  # noqa: E731
    kp_d, vp_d = dev(kp), dev(vp)
    batched = df.ops.paged_attention(h, dev(q), kp_d, vp_d, table, lens, cu, split_size=256)[0].numpy()
    for b in range(len(kv_lens)):
        qb = q[cu[b]:cu[b + 1]]
        alone = df.ops.paged_attention(h, dev(qb), kp_d, vp_d, table[b:b + 1], lens[b:b + 1], [0, q_lens[b]],
                                       split_size=256)[0].numpy()
        ref = df.ops.attention_kv(h, dev(qb), dev(k_seq[b]), dev(v_seq[b]), [0, q_lens[b]], [0, kv_lens[b]])[0]
        if h.backend.startswith("cuda"):
            tol = attention_out_tolerance(dtype, dtype != "fp32", max(kv_lens), np.abs(vp).max())
            np.testing.assert_allclose(alone.astype(np.float32), ref.numpy().astype(np.float32), **tol)
        else:
            np.testing.assert_array_equal(alone, ref.numpy())
        np.testing.assert_array_equal(batched[cu[b]:cu[b + 1]], alone)


def test_paged_kv_write_scatters_rows(h):
    rng = np.random.default_rng(3)
    kp = np.zeros((5, 4, 2, 8), np.float32)
    vp = np.zeros_like(kp)
    k, v = rng.standard_normal((2, 6, 2, 8)).astype(np.float32)
    slots = np.array([19, 0, 5, 6, 7, 12], np.int32)
    kp_d, vp_d = h.from_numpy(kp), h.from_numpy(vp)
    df.ops.paged_kv_write(h, h.from_numpy(k), h.from_numpy(v), kp_d, vp_d, slots)
    want_k, want_v = kp.reshape(20, 2, 8).copy(), vp.reshape(20, 2, 8).copy()
    want_k[slots], want_v[slots] = k, v
    np.testing.assert_array_equal(kp_d.numpy().reshape(20, 2, 8), want_k)
    np.testing.assert_array_equal(vp_d.numpy().reshape(20, 2, 8), want_v)
    with pytest.raises(df.BadArgumentError, match=r"slot_mapping: value at position 1 is 20"):
        df.ops.paged_kv_write(h, h.from_numpy(k[:2]), h.from_numpy(v[:2]), kp_d, vp_d, np.array([0, 20], np.int32))


def test_bad_tables_are_named(h):
    q, kp, vp, table, lens, cu, _, _ = paged_case([20, 9], [1, 1], 4, 2, 16, 8, "fp32", seed=1)
    args = (h.from_numpy(q), h.from_numpy(kp), h.from_numpy(vp))
    bad = table.copy()
    bad[1, 1] = kp.shape[0]
    with pytest.raises(df.BadArgumentError, match=r"page_table\[1, 1\] = %d is not a page" % kp.shape[0]):
        df.ops.paged_attention(h, *args, bad, lens, cu)
    with pytest.raises(df.BadArgumentError, match=r"seq_lens\[0\] = %d must be in" % (table.shape[1] * 8 + 1)):
        df.ops.paged_attention(h, *args, table, np.array([table.shape[1] * 8 + 1, 9], np.int32), cu)
    with pytest.raises(df.BadArgumentError, match=r"split_size must be 0 modulo 64|split_size % 64 == 0"):
        df.ops.paged_attention(h, *args, table, lens, cu, split_size=100)


def test_bad_device_tables_give_nan_not_garbage(h):
    """Device tables are not read at submit: a bad page id or a length past the table poisons
    that sequence's output (NaN) and leaves the others exact."""
    q, kp, vp, table, lens, cu, k_seq, v_seq = paged_case([20, 9], [1, 1], 4, 2, 16, 8, "fp32", seed=2)
    bad = table.copy()
    bad[0, 1] = 1000
    out = df.ops.paged_attention(h, h.from_numpy(q), h.from_numpy(kp), h.from_numpy(vp), h.from_numpy(bad),
                                 h.from_numpy(lens), h.from_numpy(cu))[0].numpy()
    assert np.isnan(out[0]).all()
    want, _ = oracle(q, k_seq, v_seq, cu, 0.25)
    tol = ATTENTION_TOLERANCES["fp32"]
    np.testing.assert_allclose(out[1], want[1], rtol=tol["rtol"], atol=tol["atol"])
    long = np.array([table.shape[1] * 8 + 5, 9], np.int32)
    out = df.ops.paged_attention(h, h.from_numpy(q), h.from_numpy(kp), h.from_numpy(vp), h.from_numpy(table),
                                 h.from_numpy(long), h.from_numpy(cu))[0].numpy()
    assert np.isnan(out[0]).all() and not np.isnan(out[1]).any()
