"""The ring executor on plans whose chunks split a sequence over a K/V context (plan.kv_context).

The oracle is the all-resident Llama (itself checked against Hugging Face in test_llama.py) fed
each step's sequences WHOLE (one chunk, no context) with loss_scale = 1 / the step's labelled
tokens and one AdamW step with clipping: the ring, running every sequence as consecutive pieces
that attend over the keys and values of the earlier ones and accumulate dK/dV in reverse, must
give the same losses and gradients over several steps (fp32 within 1e-5 relative to the
largest magnitude, as test_llama_block.c's chunks: only the order of fp32 sums over pieces
differs; bf16 within the bf16 tolerance) and so the same weights (as
tolerances.assert_trained_weights_close), at every cap whose plan splits sequences down to the
smallest plan, with the device high-water mark under the cap."""
import numpy as np
import pytest

import dataflow as df
from dataflow._ffi import ffi
from dataflow.errors import BadArgumentError, OutOfMemoryError
from dataflow.models.batch import PackedBatch
from dataflow.models.config import LlamaConfig
from dataflow.training import loss_backward
from dataflow.training.executor import RingExecutor
from dataflow.models.host_blocks import Layout
from resident_oracle import resident_adamw
from ring_models import as_float, block_bytes
from tolerances import TOLERANCES, TRAINED_WEIGHTS_RTOL, assert_trained_weights_close

CFG = {"vocab_size": 256, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 5,
       "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024,
       "tie_word_embeddings": False, "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
SEQ, ROWS, HOST = 512, 2, "64MiB"  # the planner splits sequences into pieces of >= 256 tokens
LR, STEPS = 1e-3, 4


def plan_for(cap, dtype="fp32", master=False):
    return df.ring.plan(CFG, seq_len=SEQ, tokens_per_step=SEQ * ROWS, device_memory=cap, host_memory=HOST,
                        profile="h100-sxm", dtype=dtype, master_weights=master)


def smallest_cap(dtype="fp32", master=False):
    with pytest.raises(OutOfMemoryError) as e:
        plan_for(1024, dtype, master)
    return e.value.min_device_bytes


def pieces(row, T, vocab=CFG["vocab_size"]):
    """A sequence as consecutive chunks of T tokens: positions continue, labels aligned over the
    whole sequence (a piece's last label the next piece's first token)."""
    targets = np.append(row[1:], -100).astype(np.int32)
    return [PackedBatch(row[p:p + T], targets[p:p + T], None, vocab, True, past=p, aligned=True)
            for p in range(0, row.size, T)]


def assert_close(got, want, rtol):
    """max |got - want| <= rtol * max |want|"""
    assert np.abs(got - want).max() <= rtol * np.abs(want).max(), (np.abs(got - want).max(), np.abs(want).max())


def train_both(cap, dtype="fp32", master=False, steps=STEPS, grad_rtol=1e-5, plan=None, bandwidth=None):
    """Ring (handle capped at cap) on pieces vs the resident model on whole sequences, every
    step's gradients compared (max-relative grad_rtol); returns (ring losses, resident losses,
    ring weights, resident weights ({name: array} each), handle, executor, plan). plan: the planner's for cap unless
    given; bandwidth: the handle's link throttle."""
    plan = plan or plan_for(cap, dtype, master)
    ref_h = df.Handle("host")
    ref = df.models.Llama(ref_h, CFG, dtype=dtype, seed=1, master_weights=master)
    h = df.Handle("host", device_memory=cap, transfer_bandwidth=bandwidth)
    ex = RingExecutor(h, LlamaConfig.from_dict(CFG), plan, dtype)
    for b in range(ex.num_blocks):
        for kind in (0, 4) if master else (0,):
            ex.write(b, kind, block_bytes(ref_h, ref, b, kind, ex.block_bytes(b, kind)))
    params = ffi.new("Dataflow_AdamW_Params *", {"lr": LR, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                                                 "weight_decay": 0.1})
    rng = np.random.default_rng(0)
    ring_losses, ref_losses = [], []
    for step in range(1, steps + 1):
        tokens = rng.integers(0, CFG["vocab_size"], (ROWS, SEQ))
        chunks = [c for row in tokens for c in pieces(row, plan.chunk_tokens)]
        whole = PackedBatch(tokens, None, None, CFG["vocab_size"], True)
        scale = 1.0 / whole.num_labels
        assert sum(c.num_labels for c in chunks) == whole.num_labels
        ex.accumulate(chunks, False, scale)
        ex.wait()
        ring_losses.append(ref._batch_loss(np.concatenate(ex.token_losses([c.num_tokens for c in chunks])), scale))
        ref_losses.append(loss_backward(ref, tokens, loss_scale=scale)[0])
        for b in range(ex.num_blocks):
            assert_close(ex.read(b, 1).view(np.float32),
                         block_bytes(ref_h, ref, b, 1, ex.block_bytes(b, 1)).view(np.float32), grad_rtol)
        ex.apply(params, 1.0, step)
        resident_adamw(ref, params, 1.0, step)
    blocks = [as_float(ex.read(b, 0), dtype) for b in range(ex.num_blocks)]
    ring_w = {name: blocks[b][at:at + int(np.prod(shape))].reshape(shape)
              for name, shape, b, at in Layout(LlamaConfig.from_dict(CFG), dtype).tensors}
    return ring_losses, ref_losses, ring_w, ref.state_dict(), h, ex, plan


def kv_caps(dtype="fp32", master=False):
    """The smallest plan's cap and larger ones whose plans still split sequences."""
    low = smallest_cap(dtype, master)
    return [cap for cap in (low, low * 11 // 10, low * 5 // 4, low * 3 // 2, 2 * low)
            if plan_for(cap, dtype, master).kv_context]


def test_plans_split_sequences_at_small_caps():
    """The caps the tests below use: the smallest plan and larger ones split sequences, over
    several rounds, with streamed weights, activations (and K/V) offloaded or kept, more than
    one optimizer placement and save level (else the equality tests would not exercise them);
    a large cap runs whole sequences."""
    caps = kv_caps()
    assert len(caps) == 5 and caps[0] == smallest_cap(), caps
    plans = [plan_for(cap) for cap in caps]
    assert all(p.chunk_tokens < SEQ for p in plans)
    assert {all(p.activations_on_device) for p in plans} == {False, True}
    assert any(p.rounds_per_step > 1 for p in plans) and any(p.weight_slots < CFG["num_hidden_layers"] for p in plans)
    assert len({p.optimizer for p in plans}) >= 2 and len({p.save_levels[0] for p in plans}) == 2
    assert not plan_for("64MiB").kv_context


@pytest.mark.parametrize("which, bandwidth", [(0, None), (0, 20e6), (1, None), (2, None), (3, None), (4, None)])
def test_fp32_ring_over_a_context_equals_whole_sequences(which, bandwidth):
    """bandwidth: a slow link, so the K/V rows going out and coming in lag behind compute (a
    missing event between them shows)."""
    cap = kv_caps()[which]
    ring_l, ref_l, ring_w, ref_w, h, ex, plan = train_both(cap, bandwidth=bandwidth)
    assert plan.kv_context
    np.testing.assert_allclose(ring_l, ref_l, rtol=1e-5, atol=0)
    assert_trained_weights_close(ring_w, ref_w, TRAINED_WEIGHTS_RTOL["fp32"], LR, len(ring_l))
    assert h.memory_peak() <= cap and ex.device_bytes() <= plan.device_peak_bytes
    assert ex.host_bytes() <= plan.host_capacity


@pytest.mark.parametrize("on_device", [(0, 0, 0, 0, 0), (0, 0, 0, 1, 1), (0, 1, 1, 1, 1), (1, 1, 1, 1, 1)])
def test_every_save_level_and_rounds_of_several_sequences(on_device):
    """The smallest plan regrouped into one round of both sequences (4 chunks: a layer's K/V
    holds two documents), its layers at SAVE_ALL, SAVE_ATTENTION and SAVE_INPUT (recompute
    does nothing, or rewrites its own rows, or reads the context), activations offloaded by
    every layer, the first three, the first (its K/V through one staging pair) or none, on an
    uncapped handle."""
    plan = plan_for(smallest_cap())
    plan._c.chunks_per_round, plan._c.rounds_per_step = plan.chunks_per_round * plan.rounds_per_step, 1
    for layer, level in enumerate((2, 1, 0, 1, 0)):
        plan._c.save_level[layer] = level
        plan._c.activations_on_device[layer] = on_device[layer]
    plan._c.device_capacity = 64 << 20
    assert plan.chunks_per_round * plan.chunk_tokens == 2 * SEQ
    ring_l, ref_l, ring_w, ref_w, h, ex, plan = train_both("64MiB", steps=3, plan=plan)
    np.testing.assert_allclose(ring_l, ref_l, rtol=1e-5, atol=0)
    assert_trained_weights_close(ring_w, ref_w, TRAINED_WEIGHTS_RTOL["fp32"], LR, len(ring_l))


def test_bf16_ring_over_a_context_equals_whole_sequences():
    cap = kv_caps("bf16", True)[0]
    ring_l, ref_l, ring_w, ref_w, h, ex, plan = train_both(cap, "bf16", master=True, steps=3,
                                                           grad_rtol=TOLERANCES["bf16"]["rtol"])
    assert plan.kv_context
    np.testing.assert_allclose(ring_l, ref_l, **TOLERANCES["bf16"])
    assert_trained_weights_close(ring_w, ref_w, TRAINED_WEIGHTS_RTOL["bf16"])
    assert h.memory_peak() <= cap and ex.device_bytes() <= plan.device_peak_bytes


def test_pieces_that_do_not_continue_are_refused():
    """Bad pieces: a clear error naming the chunk, and nothing queued (the next good call trains
    as if the bad ones had never come)."""
    plan = plan_for(smallest_cap())
    T, vocab = plan.chunk_tokens, CFG["vocab_size"]
    ex = RingExecutor(df.Handle("host"), LlamaConfig.from_dict(CFG), plan, "fp32", trace=True)
    row = np.arange(SEQ) % vocab
    first, second = pieces(row, T)
    gap = pieces(row, T - 8)[2]  # starts at 2 (T - 8): not where the first piece ends
    with pytest.raises(BadArgumentError, match=rf"chunk 1 continues a document at token {2 * (T - 8)}, but the "
                                               r"chunk before it ends elsewhere"):
        ex.accumulate([first, gap], False, 1.0)
    with pytest.raises(BadArgumentError, match=r"chunk 0 continues a document .* no chunk precedes it"):
        ex.accumulate([second], False, 1.0)
    packed = PackedBatch([row[:T // 2], row[T // 2:T]], None, None, vocab, True)
    with pytest.raises(BadArgumentError, match=r"chunk 1 continues .* the chunk before it holds several documents"):
        ex.accumulate([packed, second], False, 1.0)
    beyond = PackedBatch(row[:1], None, None, vocab, True, past=SEQ)
    with pytest.raises(BadArgumentError, match=rf"chunks 0..2 reaches {SEQ + 1} tokens in 3 chunks; the plan's "
                                               rf"K/V context holds {SEQ} tokens in at most {plan.chunks_per_round}"):
        ex.accumulate([first, second, beyond], False, 1.0)
    assert ex.trace_events()[0] == []  # nothing was queued
    whole = RingExecutor(df.Handle("host"), LlamaConfig.from_dict(CFG), plan_for("64MiB"), "fp32")
    with pytest.raises(BadArgumentError, match=rf"chunk 0 has past {T}; past must be 0 \(the plan has no K/V "
                                               r"context"):
        whole.accumulate([second], False, 1.0)
    with pytest.raises(BadArgumentError, match=r"past: expected 0, or a positive count .* ONE document"):
        PackedBatch([row[:4], row[4:8]], None, None, vocab, True, past=4)
