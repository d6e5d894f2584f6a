"""The ring executor against the all-resident model: the same chunks, the same AdamW steps.

The oracle is the all-resident Llama (the executor of the all-resident plan over its own blocks,
checked against Hugging Face in test_llama.py) fed the plan's chunks one after another (loss_scale = 1 / the step's labelled tokens, gradients
accumulated, one AdamW step with clipping): ring training must give the same losses and
weights over 10 steps (fp32 within 1e-6 relative, bf16 within the bf16 tolerance) for every
plan from "everything fits" down to the smallest, while the device high-water mark stays under
the cap and the executor's host memory under the host cap."""
import numpy as np
import pytest

import dataflow as df
from dataflow._ffi import ffi, lib, modelslib
from dataflow.errors import BadArgumentError, OutOfMemoryError
from dataflow.models.batch import PackedBatch
from dataflow.models.config import LlamaConfig
from dataflow.models.host_blocks import Layout
from dataflow.ring_executor import RingExecutor
from resident_oracle import resident_adamw
from tolerances import TOLERANCES

CFG = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 6,
       "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
       "tie_word_embeddings": False, "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
SEQ, ROWS, STEPS, HOST = 16, 4, 10, "64MiB"


def plan_for(cfg, cap, dtype, host=HOST, master=False):
    return df.ring.plan(cfg, seq_len=SEQ, tokens_per_step=SEQ * ROWS, device_memory=cap, host_memory=host,
                        profile="h100-sxm", dtype=dtype, master_weights=master)


def smallest_cap(cfg, dtype, master=False):
    with pytest.raises(OutOfMemoryError) as e:
        plan_for(cfg, 1024, dtype, master=master)
    return e.value.min_device_bytes


def block_bytes(handle, model, block, kind, n):
    mem = ffi.new("Dataflow_Block_Memory *")
    modelslib.dataflow_llama_block(model._m, block, mem)
    out = np.empty(n, np.uint8)
    ptr = [mem.param, mem.grad, mem.m, mem.v, mem.master][kind]
    lib.dataflow_submit_outbound_transfer(handle._ptr(), 0, ffi.from_buffer(out), ptr, n)
    handle.sync()
    return out


def as_float(raw, dtype):
    if dtype == "fp32":
        return raw.view(np.float32)
    return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def train_both(cfg, cap, dtype, master=False, steps=STEPS, trace=False, bandwidth=None, plan=None):
    """Trains the ring (handle capped at cap, its link throttled to bandwidth; plan: the planner's
    for cap unless given) and the resident model on the same chunks; returns (ring losses,
    resident losses, ring weights, resident weights, handle, executor, plan)."""
    plan = plan or plan_for(cfg, cap, dtype, master=master)
    ref_h = df.Handle("host")
    ref = df.models.Llama(ref_h, cfg, dtype=dtype, seed=1, master_weights=master)
    h = df.Handle("host", device_memory=cap, transfer_bandwidth=bandwidth)
    ex = RingExecutor(h, LlamaConfig.from_dict(cfg), plan, dtype, trace=trace)
    for b in range(ex.num_blocks):
        for kind in (0, 4) if master else (0,):  # the resident model's masters are the unrounded init
            ex.write(b, kind, block_bytes(ref_h, ref, b, kind, ex.block_bytes(b, kind)))
    params = ffi.new("Dataflow_AdamW_Params *", {"lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                                                 "weight_decay": 0.1})
    rng, T = np.random.default_rng(0), plan.chunk_tokens
    ring_losses, ref_losses = [], []
    for step in range(1, steps + 1):
        tokens = rng.integers(0, cfg["vocab_size"], (ROWS, SEQ))
        chunks = [PackedBatch(tokens[i * T // SEQ:(i + 1) * T // SEQ], None, None, cfg["vocab_size"], True)
                  for i in range(SEQ * ROWS // T)]
        scale = 1.0 / sum(c.num_labels for c in chunks)
        ex.accumulate(chunks, False, scale)
        ex.apply(params, 1.0, step)
        ex.wait()
        ring_losses.append(sum(ref._batch_loss(t, scale) for t in ex.token_losses([c.num_tokens for c in chunks])))
        loss = sum(ref.loss_backward(tokens[i * T // SEQ:(i + 1) * T // SEQ], accumulate=i > 0, loss_scale=scale)[0]
                   for i in range(len(chunks)))
        resident_adamw(ref, params, 1.0, step)
        ref_losses.append(loss)
    ring_w = [as_float(ex.read(b, 0), dtype) for b in range(ex.num_blocks)]
    ref_w = [as_float(block_bytes(ref_h, ref, b, 0, ex.block_bytes(b, 0)), dtype) for b in range(ex.num_blocks)]
    return ring_losses, ref_losses, ring_w, ref_w, h, ex, plan


def check_memory(h, ex, plan, cap):
    assert h.memory_peak() <= cap
    assert ex.host_bytes() <= plan.host_capacity


def caps(cfg, dtype, master=False):
    low = smallest_cap(cfg, dtype, master)
    return ["64MiB", 4 * low, 2 * low, low * 5 // 4, low]


@pytest.mark.parametrize("fraction", range(5))
def test_fp32_ring_equals_resident(fraction):
    cap = caps(CFG, "fp32")[fraction]
    ring_l, ref_l, ring_w, ref_w, h, ex, plan = train_both(CFG, cap, "fp32")
    np.testing.assert_allclose(ring_l, ref_l, rtol=1e-6, atol=0)
    for a, b in zip(ring_w, ref_w):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-12)
    check_memory(h, ex, plan, df.handle.parse_bytes(cap, "cap") if isinstance(cap, str) else cap)


def test_plans_cover_every_placement():
    """The caps above reach streamed weights, offloaded activations, several rounds and every
    optimizer placement (else the equality tests would not exercise them)."""
    seen = set()
    for dtype, master in (("fp32", False), ("bf16", True)):
        for cap in caps(CFG, dtype, master):
            p = plan_for(CFG, cap, dtype, master=master)
            seen.add(p.optimizer.split(" ")[0] + (" streamed" if "streamed" in p.optimizer else ""))
            seen.add("weights streamed" if p.weight_slots < CFG["num_hidden_layers"] else "weights resident")
            seen.add("offloaded" if not all(p.activations_on_device) else "on device")
            seen.add("rounds" if p.rounds_per_step > 1 else "one round")
    assert {"device", "device streamed", "host", "weights streamed", "offloaded"} <= seen, seen


@pytest.mark.parametrize("master", [False, True])
def test_bf16_ring_equals_resident(master):
    low = smallest_cap(CFG, "bf16", master)
    for cap in ("64MiB", low):
        ring_l, ref_l, ring_w, ref_w, h, ex, plan = train_both(CFG, cap, "bf16", master=master, steps=4)
        np.testing.assert_allclose(ring_l, ref_l, **TOLERANCES["bf16"])
        for a, b in zip(ring_w, ref_w):
            np.testing.assert_allclose(a, b, **TOLERANCES["bf16"])
        check_memory(h, ex, plan, df.handle.parse_bytes(cap, "cap") if isinstance(cap, str) else cap)


def test_host_optimizer_keeps_device_grads_across_rounds():
    """A host optimizer with the edge blocks' gradients in fixed device buffers, over several
    rounds (the plan's chunks regrouped one per round, as the planner chooses for other models):
    those partial sums stay on the device between rounds and go home once per step, while the
    layers' gradients in slots go home every round; the training equals the resident one."""
    cap = smallest_cap(CFG, "fp32") * 5 // 4
    plan = plan_for(CFG, cap, "fp32")
    assert plan.optimizer == "host" and plan.grad_slots < CFG["num_hidden_layers"]
    # the planner streams the edge blocks here (as many link bytes, less memory); resident
    # ones are the path under test: set them so and give the handle their bytes
    layout = Layout(LlamaConfig.from_dict(CFG), "fp32")
    cap += sum(layout.bytes[b][k] for b in (0, len(layout.bytes) - 1) for k in (0, 1))
    plan._c.embedding_resident = plan._c.head_resident = 1
    plan._c.rounds_per_step, plan._c.chunks_per_round = plan.chunks_per_round * plan.rounds_per_step, 1
    ring_l, ref_l, ring_w, ref_w, h, ex, _ = train_both(CFG, cap, "fp32", steps=3, plan=plan, trace=True)
    np.testing.assert_allclose(ring_l, ref_l, rtol=1e-6, atol=0)
    for a, b in zip(ring_w, ref_w):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-12)
    check_memory(h, ex, plan, cap)
    sent = [(s["step"], s["block"]) for s in ex.trace_events()[0] if s["what"] == "grad out"]
    for step in (1, 2, 3):
        assert [sent.count((step, b)) for b in (0, 1, ex.num_blocks - 1)] == [1, plan.rounds_per_step, 1]


def test_trains_a_model_8x_the_device():
    cfg = {**CFG, "num_hidden_layers": 16}
    cap = smallest_cap(cfg, "fp32")
    ring_l, ref_l, ring_w, ref_w, h, ex, plan = train_both(cfg, cap, "fp32", steps=3)
    state = sum(ex.block_bytes(b, k) for b in range(ex.num_blocks) for k in range(4))
    assert state >= 8 * cap, (state, cap)
    np.testing.assert_allclose(ring_l, ref_l, rtol=1e-6, atol=0)
    check_memory(h, ex, plan, cap)


def test_plan_for_another_model():
    plan = plan_for({**CFG, "num_hidden_layers": 4}, "64MiB", "fp32")
    h = df.Handle("host")
    with pytest.raises(BadArgumentError, match=r"plan is for another model: 4 layers .* this model has 6 layers"):
        RingExecutor(h, LlamaConfig.from_dict(CFG), plan, "fp32")
    plan = plan_for({**CFG, "intermediate_size": 96}, "64MiB", "fp32")
    with pytest.raises(BadArgumentError, match=r"another model: 6 layers and \d+ parameter bytes"):
        RingExecutor(h, LlamaConfig.from_dict(CFG), plan, "fp32")


def test_capacities_too_small():
    low = smallest_cap(CFG, "fp32")
    with pytest.raises(OutOfMemoryError, match=r"the smallest plan needs"):
        plan_for(CFG, low - 1, "fp32")
    with pytest.raises(OutOfMemoryError, match=r"plans that fit .* need at least"):
        plan_for(CFG, low, "fp32", host="1KiB")
    plan = plan_for(CFG, low, "fp32")  # a handle smaller than the plan's device memory
    with pytest.raises(OutOfMemoryError, match=r"the plan needs \d+ bytes of device memory .* has \d+ of \d+ bytes free"):
        RingExecutor(df.Handle("host", device_memory=low // 2), LlamaConfig.from_dict(CFG), plan, "fp32")


def test_bad_chunks():
    plan = plan_for(CFG, "64MiB", "fp32")
    ex = RingExecutor(df.Handle("host"), LlamaConfig.from_dict(CFG), plan, "fp32")
    too_long = PackedBatch(np.zeros((ROWS + 1, SEQ), np.int64), None, None, 96, True)
    with pytest.raises(BadArgumentError, match=r"chunk 0 must have .* 1..64 tokens .* got 80 tokens"):
        ex.accumulate([too_long], False, 1.0)
    chunk = PackedBatch(np.zeros((ROWS, SEQ), np.int64), None, None, 96, True)
    with pytest.raises(BadArgumentError, match=r"num_chunks must be in \[1, 1\]"):
        ex.accumulate([chunk, chunk], False, 1.0)
    with pytest.raises(BadArgumentError, match=r"loss_scale must be finite and > 0"):
        ex.accumulate([chunk], False, float("nan"))
