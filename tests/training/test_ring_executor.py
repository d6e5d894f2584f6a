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
from dataflow.errors import BadArgumentError, OutOfMemoryError
from dataflow.models.batch import PackedBatch
from dataflow.models.config import LlamaConfig
from dataflow.models.host_blocks import Layout
from dataflow.training.executor import RingExecutor
from tolerances import TOLERANCES
from ring_models import CFG, ROWS, SEQ, plan_for, smallest_cap, train_both


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
