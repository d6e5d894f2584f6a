"""embedding / embedding_bwd_w / rope / rope_bwd on each backend against PyTorch.

embedding is a row copy, so it must equal table[ids] bit for bit; its backward is checked
against torch autograd and an fp64 scatter-add from the same rounded d_out. rope is checked
against Hugging Face's Llama rotary embedding (transformers is not a dependency, so its
formulas are reproduced below in torch, named after the HF functions), and rope_bwd against
torch autograd through that reproduction. Results must not depend on the thread count or
the SIMD path."""
import math

import ml_dtypes
import numpy as np
import pytest
import torch

import dataflow as df
from conftest import handle_fixture
from tolerances import EMBEDDING_BWD_TOLERANCES, ROPE_TOLERANCES

DTYPES = ("fp32", "fp16", "bf16")
TOKENS = (1, 7, 33, 129)
REF = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}
LLAMA3_SCALING = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position_embeddings=8192)


h = handle_fixture("h", ("embedding", "embedding_bwd_w", "rope", "rope_bwd"), streams=2)


def quantize(x, dtype):
    return np.asarray(x, np.float32).astype(REF[dtype]).astype(np.float32)


def randn(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def ragged_positions(n, seed):
    """Position ids of packed sequences: ragged lengths, each restarting at 0, some far out."""
    rng = np.random.default_rng(seed)
    pos, start = [], int(rng.integers(0, 5000))
    while len(pos) < n:
        length = int(rng.integers(1, 40))
        pos.extend(range(start, start + length))
        start = 0
    return np.array(pos[:n], np.int32)


# ---- Hugging Face Llama rotary embedding, reproduced in torch (transformers 4.4x) ----

def hf_compute_default_rope_parameters(head_dim, base):
    """transformers.modeling_rope_utils._compute_default_rope_parameters"""
    return 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


def hf_compute_llama3_parameters(head_dim, base, rope_scaling):
    """transformers.modeling_rope_utils._compute_llama3_parameters"""
    inv_freq = hf_compute_default_rope_parameters(head_dim, base)
    factor = rope_scaling["factor"]
    low_freq_factor = rope_scaling["low_freq_factor"]
    high_freq_factor = rope_scaling["high_freq_factor"]
    old_context_len = rope_scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def hf_llama_rotary_embedding(inv_freq, position_ids):
    """LlamaRotaryEmbedding.forward (attention_scaling 1), kept in fp32: HF casts cos/sin to
    x.dtype; the kernels compute in fp32, so the oracle does too."""
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].float()
    freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def hf_rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_apply_rotary_pos_emb(q, cos, sin, unsqueeze_dim=1):
    """apply_rotary_pos_emb, for one tensor: q [batch, heads, seq, head_dim]"""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (hf_rotate_half(q) * sin)


def hf_rope(x, positions, inv_freq):
    """x [tokens, heads, head_dim] as one packed batch row -> HF rope in fp32, same layout."""
    cos, sin = hf_llama_rotary_embedding(inv_freq, positions[None].long())
    return hf_apply_rotary_pos_emb(x.permute(1, 0, 2)[None], cos, sin)[0].permute(1, 0, 2)


# ---- embedding ----

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("n", TOKENS)
def test_embedding(h, dtype, id_dtype, n):
    vocab, hidden = 1001, 83
    table = randn((vocab, hidden), 1)
    ids = np.random.default_rng(n).integers(0, vocab, n).astype(id_dtype)
    ids[0] = vocab - 1
    d_table = h.from_numpy(table, dtype=dtype)
    out = df.ops.embedding(h, ids, d_table)
    assert out.shape == (n, hidden) and out.dtype == dtype
    want = torch.nn.functional.embedding(torch.from_numpy(ids).long(), torch.from_numpy(quantize(table, dtype)))
    assert np.array_equal(out.raw(), d_table.raw()[ids]), "rows are not bitwise copies"
    np.testing.assert_array_equal(out.numpy().astype(np.float32), want.numpy())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("n", TOKENS)
def test_embedding_bwd_w(h, dtype, id_dtype, n):
    vocab, hidden = 37, 83  # few rows: ids repeat
    rng = np.random.default_rng(n + 100)
    ids = rng.integers(0, vocab, n).astype(id_dtype)
    d_out = quantize(randn((n, hidden), 2), dtype)
    init = randn((vocab, hidden), 3)
    d_table = df.ops.embedding_bwd_w(h, ids, h.from_numpy(d_out, dtype=dtype), h.from_numpy(init))
    got = d_table.numpy()

    table = torch.zeros(vocab, hidden, requires_grad=True)
    torch.nn.functional.embedding(torch.from_numpy(ids).long(), table).backward(torch.from_numpy(d_out))
    np.testing.assert_allclose(got, init + table.grad.numpy(), **EMBEDDING_BWD_TOLERANCES[dtype])
    want64 = init.astype(np.float64)
    np.add.at(want64, ids, d_out.astype(np.float64))
    np.testing.assert_allclose(got, want64, **EMBEDDING_BWD_TOLERANCES[dtype])
    # untouched rows keep their bits
    untouched = np.setdiff1d(np.arange(vocab), ids)
    assert np.array_equal(got[untouched], init[untouched])


def test_embedding_bwd_w_fresh_and_token_order(h):
    """vocab= gives a zeroed d_table; one id repeated sums in token order, in fp32."""
    d_out = np.array([[1e8], [1.0], [-1e8], [1.0]], np.float32)
    got = df.ops.embedding_bwd_w(h, np.zeros(4, np.int32), h.from_numpy(d_out), vocab=3).numpy()
    want = np.float32(0)
    for v in d_out[:, 0]:
        want = np.float32(want + v)
    assert got[0, 0] == want and np.all(got[1:] == 0)


def test_embedding_device_ids_out_of_range_are_safe(h):
    """Device ids are not checked on the host: the forward gives zero rows, the backward skips."""
    vocab, hidden = 10, 33
    ids = h.from_numpy(np.array([3, -1, 10, 2**31 - 1, -2**31, 9], np.int32))
    table = randn((vocab, hidden), 4)
    out = df.ops.embedding(h, ids, h.from_numpy(table)).numpy()
    np.testing.assert_array_equal(out[[0, 5]], table[[3, 9]])
    assert np.all(out[1:5] == 0)
    ids64 = h.from_numpy(np.array([3, 2**40, -(2**40), 9], np.int64))
    d_table = df.ops.embedding_bwd_w(h, ids64, h.from_numpy(np.ones((4, hidden), np.float32)), vocab=vocab).numpy()
    assert d_table.sum() == 2 * hidden and np.all(d_table[[3, 9]] == 1)


# ---- rope ----

@pytest.mark.parametrize("scaling", [None, LLAMA3_SCALING], ids=["default", "llama3"])
@pytest.mark.parametrize("head_dim", [48, 64, 80, 128])
def test_rope_inv_freq_matches_hf(head_dim, scaling):
    theta = 500000.0
    got = df.ops.rope_inv_freq(head_dim, theta, scaling)
    want = (hf_compute_llama3_parameters(head_dim, theta, scaling) if scaling
            else hf_compute_default_rope_parameters(head_dim, theta)).numpy()
    assert got.dtype == np.float32 and got.shape == (head_dim // 2,)
    np.testing.assert_allclose(got, want, rtol=3e-7, atol=0)  # powf vs torch pow: an ulp at most
    if scaling:
        assert not np.allclose(got, df.ops.rope_inv_freq(head_dim, theta))  # the scaling did something


# Every rope_type the library computes, with the parameters that change its path (yarn: HF's
# defaults, given betas, no truncation, an explicit attention_factor, mscale over mscale_all_dim).
SCALINGS = {
    "default": {"rope_type": "default"},
    "linear": {"rope_type": "linear", "factor": 3.5},
    "llama3": LLAMA3_SCALING,
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
    "yarn_betas_untruncated": {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096,
                               "beta_fast": 24, "beta_slow": 2, "truncate": False},
    "yarn_attention_factor": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 1024,
                              "attention_factor": 0.8},
    "yarn_mscale": {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 1.0,
                    "mscale_all_dim": 0.707},
}


@pytest.mark.parametrize("name", sorted(SCALINGS))
@pytest.mark.parametrize("head_dim", [48, 64, 128])
def test_rope_parameters_match_transformers_rope_init_functions(name, head_dim):
    """inv_freq and the attention factor against transformers' own ROPE_INIT_FUNCTIONS (the
    default's _compute_default_rope_parameters) on a LlamaConfig carrying the scaling."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    scaling, theta = SCALINGS[name], 1000000.0
    config = transformers.LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
                                      max_position_embeddings=32768,
                                      rope_parameters={**scaling, "rope_theta": theta})
    kind = scaling["rope_type"]
    if kind == "default":
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
        want, want_factor = LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        want, want_factor = ROPE_INIT_FUNCTIONS[kind](config, None)
    got, factor = df.ops.rope_parameters(head_dim, theta, scaling)
    assert got.dtype == np.float32 and got.shape == (head_dim // 2,)
    np.testing.assert_allclose(got, want.numpy(), rtol=3e-7, atol=0)  # powf vs torch pow: an ulp at most
    assert factor == pytest.approx(want_factor, rel=1e-7)
    if kind != "default":  # the scaling did something
        assert not np.allclose(got, df.ops.rope_inv_freq(head_dim, theta)) or factor != 1.0


def test_rope_dynamic_and_unknown_types_are_refused():
    with pytest.raises(df.BadArgumentError, match=r"rope scaling 'dynamic' is not supported \(its frequencies change"):
        df.ops.rope_inv_freq(64, 10000.0, {"rope_type": "dynamic", "factor": 2.0})
    with pytest.raises(df.BadArgumentError, match=r"'longrope' is not supported; supported: default, linear, llama3"):
        df.ops.rope_inv_freq(64, 10000.0, {"rope_type": "longrope", "factor": 2.0})
    with pytest.raises(df.BadArgumentError, match="yarn scaling needs factor > 0"):
        df.ops.rope_inv_freq(64, 10000.0, {"rope_type": "yarn", "original_max_position_embeddings": 64})
    with pytest.raises(df.BadArgumentError, match="linear scaling needs factor > 0, got -2"):
        df.ops.rope_inv_freq(64, 10000.0, {"rope_type": "linear", "factor": -2.0})
    with pytest.raises(df.BadArgumentError, match="must be numbers"):
        df.ops.rope_inv_freq(64, 10000.0, {"rope_type": "linear", "factor": "2"})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [48, 64, 80, 128])
@pytest.mark.parametrize("n", TOKENS)
@pytest.mark.parametrize("scaling", [None, LLAMA3_SCALING], ids=["default", "llama3"])
def test_rope_fwd_bwd(h, dtype, head_dim, n, scaling):
    heads = 3
    pos = ragged_positions(n, n + head_dim)
    inv_freq = df.ops.rope_inv_freq(head_dim, 500000.0, scaling)
    x = quantize(randn((n, heads, head_dim), 5), dtype)
    dy = quantize(randn((n, heads, head_dim), 6), dtype)
    out = df.ops.rope(h, h.from_numpy(x, dtype=dtype), pos, inv_freq)
    dx = df.ops.rope_bwd(h, h.from_numpy(dy, dtype=dtype), pos, inv_freq)

    tx = torch.from_numpy(x).requires_grad_()
    y = hf_rope(tx, torch.from_numpy(pos), torch.from_numpy(inv_freq))
    y.backward(torch.from_numpy(dy))
    torch_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    np.testing.assert_allclose(out.numpy().astype(np.float32), y.detach().to(torch_dtype).float().numpy(),
                               **ROPE_TOLERANCES[dtype])
    np.testing.assert_allclose(dx.numpy().astype(np.float32), tx.grad.to(torch_dtype).float().numpy(),
                               **ROPE_TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_in_place_and_device_args(h, dtype):
    """out=x in place, positions and inv_freq as device arrays, stream 1; rope_bwd undoes rope."""
    n, heads, head_dim = 33, 4, 64
    pos = ragged_positions(n, 7)
    inv_freq = df.ops.rope_inv_freq(head_dim, 10000.0)
    x = quantize(randn((n, heads, head_dim), 8), dtype)
    want = df.ops.rope(h, h.from_numpy(x, dtype=dtype), pos, inv_freq).raw()
    dx = h.from_numpy(x, dtype=dtype)
    d_pos, d_freq = h.from_numpy(pos), h.from_numpy(inv_freq)
    assert df.ops.rope(h, dx, d_pos, d_freq, out=dx, stream=1) is dx
    h.sync()
    assert np.array_equal(dx.raw(), want)
    if dtype == "fp32":
        back = df.ops.rope_bwd(h, dx, d_pos, d_freq, dx=dx).numpy()
        np.testing.assert_allclose(back, x, rtol=1e-5, atol=1e-5)


# ---- determinism: _run_all is what test_determinism.py compares across threads and SIMD paths ----

def _run_all(handle):
    """Every op and dtype on the benchmark-like shapes; returns the outputs' bits."""
    outs = []
    n, vocab, hidden, heads, head_dim = 515, 777, 200, 5, 80
    ids = np.random.default_rng(9).integers(0, 40, n).astype(np.int32)  # many repeats
    pos = ragged_positions(n, 10)
    inv_freq = df.ops.rope_inv_freq(head_dim, 500000.0, LLAMA3_SCALING)
    for dtype in DTYPES:
        table = handle.from_numpy(randn((vocab, hidden), 11), dtype=dtype)
        outs.append(df.ops.embedding(handle, ids, table).raw())
        d_out = handle.from_numpy(randn((n, hidden), 12), dtype=dtype)
        outs.append(df.ops.embedding_bwd_w(handle, ids, d_out, vocab=vocab).raw())
        x = handle.from_numpy(randn((n, heads, head_dim), 13), dtype=dtype)
        outs.append(df.ops.rope(handle, x, pos, inv_freq).raw())
        outs.append(df.ops.rope_bwd(handle, x, pos, inv_freq).raw())
    return outs


# ---- bad input ----

def test_embedding_bad_input(h):
    table = h.from_numpy(randn((50, 16), 14))
    with pytest.raises(df.BadArgumentError, match=r"embedding ids: value at position 3 is 50, expected in \[0, 50\)"):
        df.ops.embedding(h, np.array([0, 1, 2, 50, 7], np.int32), table)
    with pytest.raises(df.BadArgumentError, match=r"position 0 is -1, expected in \[0, 50\)"):
        df.ops.embedding_bwd_w(h, np.array([-1], np.int64), h.empty((1, 16)), vocab=50)
    with pytest.raises(df.BadArgumentError, match=r"embedding ids: dtype must be one of .*int32.*got numpy float32"):
        df.ops.embedding(h, np.zeros(3, np.float32), table)
    with pytest.raises(df.BadArgumentError, match=r"embedding: out must have shape \[num_tokens, hidden\] with "
                                                  r"hidden = 16 \(from table\), got \(3, 15\)"):
        df.ops.embedding(h, np.zeros(3, np.int32), table, out=h.empty((3, 15)))
    with pytest.raises(df.BadArgumentError, match=r"embedding: table/out dtype must be one of \{fp32, fp16, bf16\}, "
                                                  r"got int32"):
        df.ops.embedding(h, np.zeros(3, np.int32), h.from_numpy(np.zeros((4, 4), np.int32)))
    with pytest.raises(df.BadArgumentError, match=r"embedding_bwd_w: d_table dtype must be one of \{fp32\}, got bf16"):
        df.ops.embedding_bwd_w(h, np.zeros(2, np.int32), h.empty((2, 16)), h.empty((50, 16), "bf16"))
    with pytest.raises(df.BadArgumentError, match=r"embedding_bwd_w: d_out must have shape \[num_tokens, hidden\] with num_tokens = 3 "
                                                  r"\(from ids\), got \(2, 16\)"):
        df.ops.embedding_bwd_w(h, np.zeros(3, np.int32), h.empty((2, 16)), vocab=50)


def test_embedding_bad_sizes_in_c(h):
    """The C layer checks sizes and extents itself (C callers have no Python checks)."""
    ids, table, out = h.from_numpy(np.zeros(4, np.int32)), h.empty((50, 16)), h.empty((4, 16))
    fp32, i32 = df.dtypes.enum("fp32"), df.dtypes.enum("int32")
    submit = df.ops.opslib.dataflow_submit_embedding
    with pytest.raises(df.BadArgumentError, match="embedding: num_tokens must be > 0, got 0"):
        df.errors.check(submit(h._ptr(), 0, i32, fp32, 0, 16, 50, ids.cdata, table.cdata, out.cdata))
    with pytest.raises(df.BadArgumentError, match=r"embedding: table \(1600 fp32 elements = vocab\*hidden\)"):
        df.errors.check(submit(h._ptr(), 0, i32, fp32, 4, 16, 100, ids.cdata, table.cdata, out.cdata))
    with pytest.raises(df.BadArgumentError, match=r"embedding: ids \(100 int32 elements = num_tokens\)"):
        df.errors.check(submit(h._ptr(), 0, i32, fp32, 100, 16, 50, ids.cdata, table.cdata, h.empty((100, 16)).cdata))
    with pytest.raises(df.BadArgumentError, match=r"embedding: ids dtype must be one of \{int32, int64\}, got fp32"):
        df.errors.check(submit(h._ptr(), 0, fp32, fp32, 4, 16, 50, ids.cdata, table.cdata, out.cdata))
    with pytest.raises(df.BadArgumentError, match=r"embedding: table: extent vocab\*hidden overflows int64, with hidden = "
                                                   r"1099511627776, vocab = 1099511627776"):
        df.errors.check(submit(h._ptr(), 0, i32, fp32, 4, 2**40, 2**40, ids.cdata, table.cdata, out.cdata))


def test_rope_bad_input(h):
    x = h.empty((5, 2, 64))
    inv_freq = df.ops.rope_inv_freq(64)
    with pytest.raises(df.BadArgumentError, match=r"rope: x must have shape \[num_tokens, num_heads, head_dim\] "
                                                  r"with num_tokens = 4 \(from positions\), got \(5, 2, 64\)"):
        df.ops.rope(h, x, np.zeros(4, np.int32), inv_freq)
    with pytest.raises(df.BadArgumentError, match=r"rope positions: dtype must be one of \('int32',\), got numpy int64"):
        df.ops.rope(h, x, np.zeros(5, np.int64), inv_freq)
    with pytest.raises(df.BadArgumentError, match=r"rope: inv_freq must be float32 of shape \(32,\), got float32\(16,\)"):
        df.ops.rope(h, x, np.zeros(5, np.int32), inv_freq[:16])
    with pytest.raises(df.BadArgumentError, match=r"rope_bwd: dx must be fp32 \(like dy\), got bf16"):
        df.ops.rope_bwd(h, x, np.zeros(5, np.int32), inv_freq, dx=h.empty((5, 2, 64), "bf16"))
    with pytest.raises(df.BadArgumentError, match=r"rope: requires head_dim % 2 == 0, got head_dim = 7"):
        df.ops.rope(h, h.empty((5, 2, 7)), np.zeros(5, np.int32), np.zeros(3, np.float32))
    with pytest.raises(df.BadArgumentError, match=r"rope: x/out dtype must be one of \{fp32, fp16, bf16\}, got int32"):
        df.ops.rope(h, h.from_numpy(np.zeros((5, 2, 4), np.int32)), np.zeros(5, np.int32), np.zeros(2, np.float32))
    with pytest.raises(df.BadArgumentError, match=r"rope_inv_freq: head_dim must be even .*got 2048"):
        df.ops.rope_inv_freq(2048)
    with pytest.raises(df.BadArgumentError, match=r"rope_inv_freq: theta must be > 0, got -1"):
        df.ops.rope_inv_freq(64, -1.0)
    with pytest.raises(df.BadArgumentError, match="llama3 scaling needs"):
        df.ops.rope_inv_freq(64, 10000.0, dict(LLAMA3_SCALING, high_freq_factor=0.5))
