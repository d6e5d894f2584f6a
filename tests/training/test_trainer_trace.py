"""Trainer traces (Trainer.start_trace / trace(path), dataflow.trace): all-resident training is
the ring executor's all-resident plan, so its trace is the executor's: per step the batch in,
a forward per block, the head, the losses out, a backward per block in reverse (each block's
gradient zeroed before its first use, as its update may still be reading it), the gradient norm and an AdamW update per block, every role on the Trainer's one stream
in submission order; memory counters per step; recording changes no bits (the oracle: the same
training untraced). Data-parallel traces: tests/training/test_distributed.py. Nothing timed."""
import json

import numpy as np
import pytest

import dataflow as df
from dataflow.models import Llama, LlamaConfig

CFG = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
           num_key_value_heads=2, max_position_embeddings=64)
STEPS, BLOCKS = 3, CFG["num_hidden_layers"] + 2
ROLES = ("compute", "inbound", "outbound", "optimizer")
STEP_SPANS = [("batch in", -1)] + [("forward", b) for b in range(BLOCKS - 1)] + \
    [("zero grad", BLOCKS - 1), ("head", BLOCKS - 1), ("losses out", BLOCKS - 1)] + \
    [span for b in reversed(range(BLOCKS - 1)) for span in (("zero grad", b), ("backward", b))] + \
    [("grad norm", -1)] + [("adamw", b) for b in range(BLOCKS)]


def batches():
    rng = np.random.default_rng(3)
    return [rng.integers(0, CFG["vocab_size"], size=(2, 16)) for _ in range(STEPS)]


def train(trace, **options):
    h = df.Handle("host", device_memory="64MiB", threads=1)
    model = Llama(h, LlamaConfig.from_dict(CFG), seed=7)
    trainer = df.Trainer(model, lr=1e-2, trace=trace, **options)
    losses = [trainer.step(b) for b in batches()]
    return h, trainer, losses, {n: a.numpy() for n, a in model.named_parameters().items()}


def test_resident_trace_holds_every_block_in_order_and_changes_no_bits(tmp_path):
    _, _, plain_losses, plain_weights = train(False)
    h, trainer, losses, weights = train(True)
    assert losses == plain_losses
    for name, w in weights.items():
        np.testing.assert_array_equal(w, plain_weights[name], err_msg=name)

    spans, samples = trainer.trace_events()
    assert {s["stream"] for s in spans} == set(ROLES)
    for a, b in zip(spans, spans[1:]):  # one stream: in submission order, one after another
        assert 0 < a["start"] <= a["end"] <= b["start"], (a, b)
    for step in range(1, STEPS + 1):
        got = [(s["what"], s["block"]) for s in spans if s["step"] == step]
        assert got == STEP_SPANS
    assert [m["step"] for m in samples] == [1, 2, 3, 4]  # trace start, then after each step
    assert all(0 < m["device_in_use"] <= m["device_peak"] <= h.memory_capacity() for m in samples)
    assert all(m["host_in_use"] > 0 for m in samples[1:])  # the executor's host arrays

    path = tmp_path / "trace.json"
    written = trainer.trace(str(path))
    trace = json.loads(path.read_text())
    assert trace == json.loads(json.dumps(written))
    events = trace["traceEvents"]
    threads = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == set(ROLES)
    names = {e["name"] for e in events if e["ph"] == "X"}
    assert {"forward embedding c0", "forward layer 2 c0", "head c0", "backward layer 0 c0", "adamw layer 1"} <= names
    counters = [e for e in events if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"device memory (bytes)", "host memory (bytes)"}
    assert len(counters) == 2 * len(samples)
    plan = trace["otherData"]["plan"]
    assert (plan["weight_slots"], plan["grad_slots"], plan["chunks_per_round"]) == (3, 3, 1)


def test_stopped_and_unstarted_traces():
    h = df.Handle("host", device_memory="64MiB", threads=1)
    trainer = df.Trainer(Llama(h, LlamaConfig.from_dict(CFG), seed=7), lr=1e-2)
    with pytest.raises(df.DataflowError, match=r"nothing recorded; create the Trainer with trace=True"):
        trainer.trace("unused.json")
    trainer.start_trace()
    trainer.step(batches()[0])
    trainer.stop_trace()
    trainer.step(batches()[1])
    spans, samples = trainer.trace_events()
    assert len(spans) == len(STEP_SPANS) and {s["step"] for s in spans} == {1}
    assert len(samples) == 2  # start, the first step
    trainer.start_trace()  # drops the recording
    assert trainer.trace_events()[0] == []


def test_ring_trainer_writes_the_executors_trace(tmp_path):
    h = df.Handle("host", device_memory="256KiB", threads=1)  # far below what training needs
    cfg = dict(CFG, vocab_size=96, num_hidden_layers=4)
    model = Llama(h, LlamaConfig.from_dict(cfg), seed=7)
    trainer = df.Trainer(model, lr=1e-2, host_memory="256MiB", seq_len=16, batch_size=2, profile="h100-sxm",
                         trace=True)
    assert trainer.plan is not None
    for b in batches()[:2]:
        trainer.step(b)
    trace = trainer.trace(str(tmp_path / "ring.json"))
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == {"compute", "inbound", "outbound", "optimizer"}
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {"weights in layer 3", "forward layer 3 c0", "backward layer 0 c0"} <= {e["name"] for e in complete}
    assert {e["args"]["step"] for e in complete} == {1, 2}
    assert "plan" in trace["otherData"]
