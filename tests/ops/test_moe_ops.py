"""The mixture-of-experts ops on each backend against PyTorch autograd and Hugging Face:
router (softmax, torch.topk's choice and order, ties included, optional renormalization) and
its backward; the permutation to experts and its backward; the grouped expert matmuls (forward,
d_x, d_w); the weighted combine and its backward; the load-balancing loss of transformers'
load_balancing_loss_func (over several layers, value and gradient). Odd shapes: token counts
not a multiple of 8, 5..8 experts (and 128, where torch.topk switches algorithm), top-k 1..3.
"""
import numpy as np
import pytest
import torch

import dataflow as df
from dataflow import build_info
from conftest import handle_fixture
from tolerances import TOLERANCES, matmul_tolerance
from dtype_rounding import quantize

ROUTINGS = [(13, 5, 1), (21, 6, 2), (37, 7, 3), (9, 8, 2)]  # tokens, experts, top_k

# the router's tests on hr; the rest on h, routed by torch, so that each runs where its ops are
hr = handle_fixture("hr", ("moe_router", "moe_router_bwd", "moe_router_stats"), streams=2)
h = handle_fixture("h", ("moe_router_bwd", "moe_router_stats", "moe_aux_loss", "moe_aux_loss_bwd", "moe_permute_index",
                         "embedding", "moe_combine", "moe_combine_bwd", "moe_grouped_matmul",
                         "moe_grouped_matmul_bwd_w"), streams=2)


def torch_route(logits, top_k, norm):
    """Hugging Face's Qwen3MoeTopKRouter after the gate matmul (Mixtral's is norm=True)."""
    probs = torch.softmax(logits, dim=-1, dtype=torch.float)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if norm:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return probs, weights, ids


def route(h, logits, top_k, norm=False):
    return df.ops.moe_router(h, h.from_numpy(logits), top_k, norm)


def torch_routed(h, logits, top_k, norm=False):
    """(probs, topk_weights, topk_ids) as device arrays, routed by torch_route."""
    probs, weights, ids = torch_route(torch.from_numpy(logits), top_k, norm)
    return h.from_numpy(probs.numpy()), h.from_numpy(weights.numpy()), h.from_numpy(ids.numpy().astype(np.int32))


# ---- router ----

@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("tokens,experts,top_k", ROUTINGS + [(11, 128, 1), (11, 128, 2), (5, 200, 3)])
def test_router_matches_torch(hr, tokens, experts, top_k, norm):
    logits = np.random.default_rng(tokens * experts + top_k).standard_normal((tokens, experts)).astype(np.float32) * 2
    probs, weights, ids = route(hr, logits, top_k, norm)
    tp, tw, ti = torch_route(torch.from_numpy(logits), top_k, norm)
    np.testing.assert_array_equal(ids.numpy(), ti.numpy())
    np.testing.assert_allclose(probs.numpy(), tp.numpy(), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(weights.numpy(), tw.numpy(), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("experts", [5, 6, 7, 8, 64, 130, 512])
@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_router_breaks_ties_as_torch_topk(hr, experts, top_k):
    """Logits from {0, 1, 2}: many exactly equal probabilities per row. torch.topk on CPU does not
    order ties by index (libstdc++'s nth_element / partial_sort do not keep order); the op gives
    torch's ids in torch's order for every row."""
    logits = np.random.default_rng(experts * 10 + top_k).integers(0, 3, (301, experts)).astype(np.float32)
    _, _, ids = route(hr, logits, top_k, norm=True)
    want = torch.topk(torch.softmax(torch.from_numpy(logits), -1), top_k, dim=-1).indices.numpy()
    assert not (np.sort(want, axis=1) == want).all() or top_k == 1  # ties really are out of index order
    np.testing.assert_array_equal(ids.numpy(), want)


@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("tokens,experts,top_k", ROUTINGS)
def test_router_bwd_matches_autograd(h, tokens, experts, top_k, norm):
    rng = np.random.default_rng(7 + tokens)
    logits = rng.standard_normal((tokens, experts)).astype(np.float32)
    d_w = rng.standard_normal((tokens, top_k)).astype(np.float32)
    probs, _, ids = torch_routed(h, logits, top_k, norm)
    d_logits = df.ops.moe_router_bwd(h, h.from_numpy(d_w), probs, ids, norm)
    tl = torch.from_numpy(logits).requires_grad_()
    _, tw, _ = torch_route(tl, top_k, norm)
    (tw * torch.from_numpy(d_w)).sum().backward()
    np.testing.assert_allclose(d_logits.numpy(), tl.grad.numpy(), rtol=1e-5, atol=1e-7)


# ---- permutation ----

def reference_permutation(ids, experts):
    """(offsets, row_map, slot_of): assignments sorted by expert, stably by token then j."""
    flat = ids.reshape(-1)
    valid = (flat >= 0) & (flat < experts)
    order = np.argsort(np.where(valid, flat, experts), kind="stable")[:valid.sum()]
    slot_of = np.full(flat.size, -1, np.int32)
    slot_of[order] = np.arange(order.size)
    row_map = np.full(flat.size, -1, np.int32)
    row_map[:order.size] = order // ids.shape[1]
    offsets = np.concatenate([[0], np.cumsum(np.bincount(flat[valid], minlength=experts))]).astype(np.int32)
    return offsets, row_map, slot_of.reshape(ids.shape)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("tokens,experts,top_k", ROUTINGS)
def test_permute_and_its_backward(h, tokens, experts, top_k, dtype):
    rng = np.random.default_rng(3 + tokens)
    _, _, ids = torch_routed(h, rng.standard_normal((tokens, experts)).astype(np.float32), top_k)
    x = quantize(rng.standard_normal((tokens, 19)), dtype)
    x_perm, offsets, row_map, slot_of = df.ops.moe_permute(h, h.from_numpy(x, dtype=dtype), ids, experts)
    want = reference_permutation(ids.numpy(), experts)
    for got, w in zip((offsets, row_map, slot_of), want):
        np.testing.assert_array_equal(got.numpy(), w)
    np.testing.assert_array_equal(x_perm.numpy().astype(np.float32), x[want[1]])
    d_x_perm = quantize(rng.standard_normal(x_perm.shape), dtype)
    d_x = df.ops.moe_permute_bwd(h, h.from_numpy(d_x_perm, dtype=dtype), slot_of)
    tx = torch.from_numpy(x).requires_grad_()
    (tx[torch.from_numpy(want[1]).long()] * torch.from_numpy(d_x_perm)).sum().backward()
    np.testing.assert_allclose(d_x.numpy().astype(np.float32), tx.grad.numpy(), **TOLERANCES[dtype])


def test_permute_skips_ids_outside_the_experts(h):
    """Ids are device data: one outside [0, experts) is routed nowhere (slot -1, no count), and
    the rows past the last expert are zero."""
    ids = np.array([[0, 4], [-1, 2], [4, 5], [2, 0], [1, 3]], np.int32)
    x = np.arange(5 * 3, dtype=np.float32).reshape(5, 3) + 1
    x_perm, offsets, row_map, slot_of = df.ops.moe_permute(h, h.from_numpy(x), h.from_numpy(ids), 5)
    want = reference_permutation(ids, 5)
    for got, w in zip((offsets, row_map, slot_of), want):
        np.testing.assert_array_equal(got.numpy(), w)
    assert offsets.numpy()[-1] == 8 and (x_perm.numpy()[8:] == 0).all()


# ---- grouped expert matmuls ----

def grouped_case(rng, tokens, experts, top_k, dtype, h_in=23, n_out=17):
    ids = np.stack([rng.permutation(experts)[:top_k] for _ in range(tokens)]).astype(np.int32)
    ids[ids == experts - 1] = 0 if top_k == 1 else ids[ids == experts - 1]  # top-1: the last expert gets no rows
    offsets, row_map, _ = reference_permutation(ids, experts)
    n = offsets[-1]
    x = quantize(rng.uniform(-1, 1, (tokens * top_k, h_in)), dtype)
    w = quantize(rng.uniform(-1, 1, (experts, n_out, h_in)), dtype)
    dy = quantize(rng.uniform(-1, 1, (tokens * top_k, n_out)), dtype)
    return offsets, n, x, w, dy


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("tokens,experts,top_k", ROUTINGS)
def test_grouped_matmul_forward_and_backward_match_autograd(h, tokens, experts, top_k, dtype):
    rng = np.random.default_rng(11 + tokens)
    offsets, n, x, w, dy = grouped_case(rng, tokens, experts, top_k, dtype)
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    segments = [(e, offsets[e], offsets[e + 1]) for e in range(experts)]
    out_t = torch.cat([tx[a:b] @ tw[e].T for e, a, b in segments])
    (out_t * torch.from_numpy(dy[:n])).sum().backward()

    d_offsets, dx_, dw_ = h.from_numpy(offsets), h.from_numpy(x, dtype=dtype), h.from_numpy(w, dtype=dtype)
    out = df.ops.moe_grouped_matmul(h, dx_, dw_, d_offsets)
    np.testing.assert_allclose(out.numpy().astype(np.float32)[:n], out_t.detach().numpy(), **matmul_tolerance(dtype, 23))
    # d_x: dy @ w[e] over the same rows (w not transposed)
    d_x = df.ops.moe_grouped_matmul(h, h.from_numpy(dy, dtype=dtype), dw_, d_offsets, trans_w=False)
    np.testing.assert_allclose(d_x.numpy().astype(np.float32)[:n], tx.grad.numpy()[:n], **matmul_tolerance(dtype, 17))
    # d_w accumulates: start from a known gradient
    base = rng.uniform(-1, 1, w.shape).astype(np.float32)
    d_w = df.ops.moe_grouped_matmul_bwd_w(h, h.from_numpy(dy, dtype=dtype), dx_, d_offsets, h.from_numpy(base))
    np.testing.assert_allclose(d_w.numpy(), base + tw.grad.numpy(), **matmul_tolerance("fp32", tokens))


def test_grouped_matmul_bf16_weight_gradient_in_bf16(h):
    rng = np.random.default_rng(5)
    offsets, n, x, w, dy = grouped_case(rng, 19, 6, 2, "bf16")
    d_w = df.ops.moe_grouped_matmul_bwd_w(h, h.from_numpy(dy, dtype="bf16"), h.from_numpy(x, dtype="bf16"),
                                          h.from_numpy(offsets), h.zeros(w.shape, "bf16"))
    want = np.stack([dy[offsets[e]:offsets[e + 1]].T @ x[offsets[e]:offsets[e + 1]] for e in range(6)])
    np.testing.assert_allclose(d_w.numpy().astype(np.float32), want, rtol=1.6e-2, atol=1e-4)


@pytest.mark.parametrize("engine", ["onednn", "fallback"])
def test_grouped_matmul_on_each_host_engine(monkeypatch, engine):
    """The host runs each expert on oneDNN (one runtime-dimension primitive for every row count)
    or on the blocked fallback (DATAFLOW_HOST_MATMUL); both give the oracle's result, routing
    after routing."""
    if engine == "onednn" and not build_info.info()["onednn"]:
        pytest.skip("this build has no oneDNN")
    monkeypatch.setenv("DATAFLOW_HOST_MATMUL", engine)
    rng = np.random.default_rng(31)
    with df.Handle("host", streams=1) as hh:
        w = quantize(rng.uniform(-1, 1, (5, 9, 21)), "bf16")
        d_w = hh.from_numpy(w, dtype="bf16")
        for tokens, top_k in ((7, 1), (29, 2), (3, 3)):
            offsets, n, x, _, _ = grouped_case(rng, tokens, 5, top_k, "bf16", h_in=21, n_out=9)
            out = df.ops.moe_grouped_matmul(hh, hh.from_numpy(x, dtype="bf16"), d_w, hh.from_numpy(offsets))
            want = np.concatenate([x[offsets[e]:offsets[e + 1]] @ w[e].T for e in range(5)])
            np.testing.assert_allclose(out.numpy().astype(np.float32)[:n], want, **matmul_tolerance("bf16", 21))


def test_grouped_matmul_clamps_untrusted_offsets(h):
    """Offsets are device data: out-of-range and decreasing values are clamped (no crash, no
    write outside out), and each expert multiplies the rows left to it."""
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (10, 5)).astype(np.float32)
    w = rng.uniform(-1, 1, (3, 4, 5)).astype(np.float32)
    offsets = np.array([-7, 6, 2, 1000], np.int32)  # rows [0, 6), [6, 6), [6, 10)
    out = df.ops.moe_grouped_matmul(h, h.from_numpy(x), h.from_numpy(w), h.from_numpy(offsets))
    want = np.concatenate([x[:6] @ w[0].T, x[6:] @ w[2].T])
    np.testing.assert_allclose(out.numpy(), want, **matmul_tolerance("fp32", 5))


# ---- combine ----

@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("tokens,experts,top_k", ROUTINGS)
def test_combine_and_its_backward_match_autograd(h, tokens, experts, top_k, dtype):
    rng = np.random.default_rng(13 + tokens)
    _, weights, ids = torch_routed(h, rng.standard_normal((tokens, experts)).astype(np.float32), top_k, norm=True)
    _, _, slot_of = reference_permutation(ids.numpy(), experts)
    hidden = 37
    y_perm = quantize(rng.standard_normal((tokens * top_k, hidden)), dtype)
    dy = quantize(rng.standard_normal((tokens, hidden)), dtype)
    d_slots = h.from_numpy(slot_of)
    y = df.ops.moe_combine(h, h.from_numpy(y_perm, dtype=dtype), d_slots, weights)
    ty, tw = torch.from_numpy(y_perm).requires_grad_(), torch.from_numpy(weights.numpy()).requires_grad_()
    y_t = (ty[torch.from_numpy(slot_of).long()] * tw[..., None]).sum(1)
    (y_t * torch.from_numpy(dy)).sum().backward()
    np.testing.assert_allclose(y.numpy().astype(np.float32), y_t.detach().numpy(), **TOLERANCES[dtype])
    d_y_perm, d_w = df.ops.moe_combine_bwd(h, h.from_numpy(dy, dtype=dtype), h.from_numpy(y_perm, dtype=dtype),
                                           d_slots, weights)
    np.testing.assert_allclose(d_y_perm.numpy().astype(np.float32), ty.grad.numpy(), **TOLERANCES[dtype])
    np.testing.assert_allclose(d_w.numpy(), tw.grad.numpy(), **matmul_tolerance("fp32", hidden))


# ---- the load-balancing loss over several layers, as transformers computes it ----

@pytest.mark.slow  # imports transformers
@pytest.mark.parametrize("tokens,experts,top_k", ROUTINGS)
def test_aux_loss_and_gradient_match_transformers(h, tokens, experts, top_k):
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func
    rng = np.random.default_rng(17 + tokens)
    layers = [rng.standard_normal((tokens, experts)).astype(np.float32) for _ in range(3)]
    coef = 0.37
    stats = h.zeros((2, experts), "fp32")
    routed = []
    for logits in layers:
        probs, _, ids = torch_routed(h, logits, top_k)
        df.ops.moe_router_stats(h, probs, ids, stats)
        routed.append(probs)
    loss = df.ops.moe_aux_loss(h, stats, tokens * len(layers))
    tl = [torch.from_numpy(x).requires_grad_() for x in layers]
    want = load_balancing_loss_func(tuple(tl), experts, top_k)
    (coef * want).backward()
    np.testing.assert_allclose(loss.numpy(), [want.item()], rtol=2e-6)
    for probs, t in zip(routed, tl):
        d_logits = df.ops.moe_aux_loss_bwd(h, stats, probs, tokens * len(layers), h.zeros((tokens, experts), "fp32"),
                                           d_loss=coef)
        np.testing.assert_allclose(d_logits.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-9)


@pytest.mark.slow  # imports transformers
def test_aux_loss_bwd_adds_to_the_router_gradient(h):
    """The router's d_logits and the aux loss's share add up as autograd adds them."""
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func
    rng = np.random.default_rng(23)
    logits, d_w = rng.standard_normal((15, 6)).astype(np.float32), rng.standard_normal((15, 2)).astype(np.float32)
    probs, _, ids = torch_routed(h, logits, 2, norm=True)
    stats = df.ops.moe_router_stats(h, probs, ids, h.zeros((2, 6), "fp32"))
    d_logits = df.ops.moe_router_bwd(h, h.from_numpy(d_w), probs, ids, norm_topk_prob=True)
    df.ops.moe_aux_loss_bwd(h, stats, probs, 15, d_logits, d_loss=0.02)
    tl = torch.from_numpy(logits).requires_grad_()
    _, tw, _ = torch_route(tl, 2, True)
    ((tw * torch.from_numpy(d_w)).sum() + 0.02 * load_balancing_loss_func((tl,), 6, 2)).backward()
    # the two shares cancel in places: absolute slack of a few ulp of the largest gradient (~0.3)
    np.testing.assert_allclose(d_logits.numpy(), tl.grad.numpy(), rtol=1e-5, atol=2e-7)


# ---- bad input ----

def test_bad_arguments_name_the_argument(hr):
    logits = hr.from_numpy(np.zeros((4, 5), np.float32))
    with pytest.raises(df.BadArgumentError, match="top_k must be an integer in"):
        df.ops.moe_router(hr, logits, 6)
    with pytest.raises(df.BadArgumentError, match=r"moe_router: logits dtype must be one of \{fp32\}, got bf16"):
        df.ops.moe_router(hr, hr.from_numpy(np.zeros((4, 5), np.float32), dtype="bf16"), 2)
    with pytest.raises(df.DataflowError, match="top_k"):
        df.ops.moe_router(hr, hr.from_numpy(np.zeros((4, 40), np.float32)), 17)  # past DATAFLOW_MOE_MAX_TOP_K
    _, _, ids = df.ops.moe_router(hr, logits, 2)
    with pytest.raises(df.BadArgumentError, match="x must be \\[4, hidden\\]"):
        df.ops.moe_permute(hr, hr.from_numpy(np.zeros((3, 7), np.float32)), ids, 5)
    with pytest.raises(df.BadArgumentError, match=r"moe_grouped_matmul: expert_offsets must have shape "
                                                  r"\[experts \+ 1\] = \(6,\), got \(5,\)"):
        df.ops.moe_grouped_matmul(hr, hr.zeros((8, 3), "fp32"), hr.zeros((5, 4, 3), "fp32"), hr.zeros((5,), "int32"))
    with pytest.raises(df.BadArgumentError, match="rows must be a positive integer"):
        df.ops.moe_aux_loss(hr, hr.zeros((2, 5), "fp32"), 0)
