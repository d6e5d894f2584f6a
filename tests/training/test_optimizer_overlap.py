"""The optimizer under the next step's forward (ring_executor.h, dataflow_ring_executor_apply):
where the plan's optimizer memory is its own, apply ends without a barrier and block b's next
forward waits only for block b's update, so the next step starts while later blocks still
update; a streamed optimizer (its slots are the training's memory) stays fenced. Trainer.step
returns once its loss is known; reading weights right after it sees the update."""
import numpy as np
import pytest

import dataflow as df
from dataflow._ffi import ffi
from dataflow.custom_ops import compile_c
from dataflow.errors import DataflowError
from dataflow.models.batch import PackedBatch
from dataflow.models.config import LlamaConfig
from dataflow.training.executor import RingExecutor
from ring_models import CFG, KW, PROFILE, ROWS, SEQ, batches, plan_for, smallest_cap

# a small embedding, many wide layers: the updates after block 0's are long next to a thread's wake-up
WIDE = dict(CFG, vocab_size=512, hidden_size=64, intermediate_size=2048, num_hidden_layers=8)
# an external op whose asynchronous failure stands in for a failing update kernel
FAILING_UPDATE = r"""
#include "dataflow/handle.h"
Dataflow_Status failing_update(Dataflow_Handle *h, int stream_id, const Op *op, void *state) {
    (void)h; (void)stream_id; (void)op; (void)state;
    return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "the update failed");
}
"""
PARAMS = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}


def two_steps_unwaited(plan):
    """Two steps queued back to back (no wait between them) with tracing; the spans."""
    ex = RingExecutor(df.Handle("host"), LlamaConfig.from_dict(WIDE), plan, "fp32", trace=True)
    params = ffi.new("Dataflow_AdamW_Params *", PARAMS)
    rng, T = np.random.default_rng(0), plan.chunk_tokens
    for step in (1, 2):
        tokens = rng.integers(0, WIDE["vocab_size"], (ROWS, SEQ))
        chunks = [PackedBatch(tokens[i * T // SEQ:(i + 1) * T // SEQ], None, None, WIDE["vocab_size"], True)
                  for i in range(SEQ * ROWS // T)]
        ex.accumulate(chunks, False, 1.0 / sum(c.num_labels for c in chunks))
        ex.apply(params, 1.0, step)
    ex.wait()
    spans, _ = ex.trace_events()
    last = ex.num_blocks - 1
    update_end = max(s["end"] for s in spans if s["what"] == "adamw" and s["block"] == last and s["step"] == 1)
    first_update_end = max(s["end"] for s in spans if s["what"] == "adamw" and s["block"] == 0 and s["step"] == 1)
    forward = min(s["start"] for s in spans if s["what"] == "forward" and s["block"] == 0 and s["step"] == 2)
    return forward, first_update_end, update_end


def test_next_forward_starts_under_the_update():
    plan = df.ring.plan(WIDE, seq_len=SEQ, tokens_per_step=SEQ * ROWS, device_memory="256MiB",
                        host_memory="256MiB", profile=PROFILE, dtype="fp32")
    assert plan.optimizer.startswith("device (resident") and plan.weight_slots == plan.num_layers
    forward, first_update_end, last_update_end = two_steps_unwaited(plan)
    assert first_update_end <= forward < last_update_end  # block 0's update, not the head's


def test_reading_weights_right_after_step_sees_the_update():
    """A ring Trainer whose optimizer overlaps (state on the device): state_dict right after
    each step equals the all-resident Trainer's, and so do the loss and gradient norm."""
    model = df.models.Llama(df.Handle("host"), CFG, dtype="fp32", seed=1)
    plan = plan_for(CFG, "64MiB", "fp32")
    assert plan.optimizer.startswith("device (resident")
    t = df.Trainer(model, **KW, plan=plan)
    ref = df.Trainer(df.models.Llama(df.Handle("host"), CFG, dtype="fp32", seed=1, placement="device"), **KW)
    for batch in batches(3):
        np.testing.assert_allclose(t.step(batch), ref.step(batch), rtol=1e-6, atol=0)
        got, want = model.state_dict(), ref.model.state_dict()
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(t.last_grad_norm, ref.last_grad_norm, rtol=1e-6, atol=0)


def test_a_failed_update_surfaces_at_the_next_step():
    """step() returns with the update still queued on the optimizer stream (3): a failure there
    (FAILING_UPDATE) is raised by the next step,
    not lost; the one after it trains again."""
    h = df.Handle("host")
    t = df.Trainer(df.models.Llama(h, CFG, dtype="fp32", seed=1), **KW, plan=plan_for(CFG, "64MiB", "fp32"))
    first, second, third = batches(3)
    assert np.isfinite(t.step(first))

    fail = h.register_external_op("failing_update", ["int64_scalar"], library=compile_c(FAILING_UPDATE),
                                  symbol="failing_update")
    fail(1, stream=3)
    with pytest.raises(DataflowError, match="stream 3: external op 'failing_update' failed: the update failed"):
        t.step(second)
    assert t.step_count == 1 and np.isfinite(t.step(third)) and t.step_count == 2


def test_planner_counts_a_host_update_under_the_next_forward():
    """The model of time (ring_time.c): a host update runs under the next step's forward, so it
    adds nothing after the backward; a streamed one stays after it, fenced; describe() says which."""
    host = plan_for(CFG, smallest_cap(CFG, "fp32") * 5 // 4, "fp32")
    assert host.optimizer == "host"
    assert [p["name"] for p in host.phases] == ["forward", "head (turn)", "backward", "optimizer (previous step's)"]
    update, forward = host.phases[3], host.phases[0]
    assert update["start"] == 0 and 0 < update["seconds"] <= forward["seconds"]
    assert host.predicted_step_seconds == pytest.approx(sum(p["seconds"] for p in host.phases[:3]))
    assert "runs under the next step's forward" in host.describe()
    streamed = df.ring.plan("llama3-8b", 8192, "24GiB", "48GiB", tokens_per_step=64 * 8192, profile=PROFILE,
                            optimizer_state="8bit")
    assert streamed.optimizer.startswith("device (state streamed through slots after")
    assert streamed.phases[3]["name"] == "optimizer" and streamed.phases[3]["seconds"] > 0
    assert "runs after the backward, fenced" in streamed.describe()
