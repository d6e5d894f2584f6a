"""The ring executor's trace (ring_executor.h "Trace" over dataflow/trace.h, RingExecutor.trace): Chrome trace-event
JSON with a track per stream and memory counters; spans in the executor's order on each stream,
ordered across streams as the executor's events order the work; with a throttled link, inbound
transfers under compute. Tracing changes no bits. Structural checks only, nothing timed."""
import json

import numpy as np
import pytest

import dataflow as df
from dataflow._ffi import ffi, lib, ringlib
from dataflow.errors import BadArgumentError, DataflowError, check
from dataflow.models.config import LlamaConfig
from dataflow.training.executor import RingExecutor
from ring_models import CFG, ROWS, SEQ, plan_for, smallest_cap, train_both

STEPS = 3
STREAMS = {"compute", "inbound", "outbound", "optimizer"}


def block_label(b, n):
    return "embedding" if b == 0 else "head" if b == n - 1 else f"layer {b - 1}"


def expected_compute(plan, n_blocks, step_chunks):
    """The executor's compute order within a step (forward, head, backward spans): per round,
    layer-major over its chunks, forward up, the head at the turn, backward down."""
    L, K = plan.num_layers, plan.chunks_per_round
    out = []
    for first in range(0, step_chunks, K):
        chunks = range(first, min(first + K, step_chunks))
        out += [("forward", 0, c) for c in chunks]
        out += [("forward", 1 + l, c) for l in range(L) for c in chunks]
        out += [("head", n_blocks - 1, c) for c in chunks]
        out += [("backward", 1 + l, c) for l in reversed(range(L)) for c in chunks]
        out += [("backward", 0, c) for c in chunks]
    return out


def next_index(spans, i, pred, step=1):
    j = i + step
    while 0 <= j < len(spans) and not pred(spans[j]):
        j += step
    assert 0 <= j < len(spans), f"no matching span for {spans[i]}"
    return j


def check_order(spans, plan, n_blocks):
    step_chunks = SEQ * ROWS // plan.chunk_tokens
    # on each stream: in submission order, one after another
    for stream in STREAMS:
        mine = [s for s in spans if s["stream"] == stream]
        for a, b in zip(mine, mine[1:]):
            assert 0 < a["start"] <= a["end"] <= b["start"], (a, b)
    # the compute stream runs the step in the executor's order
    for step in range(1, STEPS + 1):
        got = [(s["what"], s["block"], s["chunk"]) for s in spans
               if s["step"] == step and s["what"] in ("forward", "head", "backward")]
        assert got == expected_compute(plan, n_blocks, step_chunks)
    # across streams, as the events order them: what a transfer brings is used after it ends,
    # what one sends was made before it starts
    compute = ("forward", "head", "backward")
    checked = set()
    for i, s in enumerate(spans):
        if s["what"] == "weights in":
            j = next_index(spans, i, lambda u: u["what"] in compute and u["block"] == s["block"])
            assert spans[j]["start"] >= s["end"], (s, spans[j])
        elif s["what"] == "activations in":
            j = next_index(spans, i, lambda u: u["what"] == "backward" and (u["block"], u["chunk"]) == (s["block"], s["chunk"]))
            assert spans[j]["start"] >= s["end"], (s, spans[j])
        elif s["what"] == "activations out":
            j = next_index(spans, i, lambda u: u["what"] == "forward" and (u["block"], u["chunk"]) == (s["block"], s["chunk"]), -1)
            assert spans[j]["end"] <= s["start"], (spans[j], s)
        elif s["what"] == "grad out":
            j = next_index(spans, i, lambda u: u["what"] in compute and u["block"] == s["block"], -1)
            assert spans[j]["end"] <= s["start"], (spans[j], s)
        elif s["what"] == "adamw":
            j = next_index(spans, i, lambda u: u["what"] == "grad norm", -1)
            assert spans[j]["end"] <= s["start"], (spans[j], s)
        else:
            continue
        checked.add(s["what"])
    return checked


def overlaps(a, b):
    return max(a["start"], b["start"]) < min(a["end"], b["end"])


def test_trace_of_a_streamed_plan(tmp_path):
    """Weights streamed through 2 slots, activations offloaded, a host optimizer, over a throttled
    link: the trace holds every stream's work in order, and inbound transfers ran under compute."""
    cap = smallest_cap(CFG, "fp32") * 5 // 4
    plain = train_both(CFG, cap, "fp32", steps=STEPS)
    ring_l, ref_l, ring_w, _, h, ex, plan = train_both(CFG, cap, "fp32", steps=STEPS, trace=True, bandwidth="5MB")
    assert 2 <= plan.weight_slots < plan.num_layers and not all(plan.activations_on_device)
    assert plan.optimizer.startswith("host")
    np.testing.assert_array_equal(ring_l, plain[0])  # tracing changes no bits
    for a, b in zip(ring_w, plain[2]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(ring_l, ref_l, rtol=1e-6, atol=0)

    spans, samples = ex.trace_events()
    checked = check_order(spans, plan, ex.num_blocks)
    assert {"weights in", "activations in", "activations out", "grad out", "adamw"} <= checked
    compute = [s for s in spans if s["stream"] == "compute"]
    inbound = [s for s in spans if s["stream"] == "inbound"]
    assert any(overlaps(a, b) for a in inbound for b in compute)
    assert len(samples) >= STEPS + 1  # trace_start, then each step's wait
    assert all(m["device_peak"] <= cap and m["host_in_use"] == ex.host_bytes() for m in samples)

    path = tmp_path / "trace.json"
    written = ex.trace(str(path))
    trace = json.loads(path.read_text())
    assert trace == json.loads(json.dumps(written))
    events = trace["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert set(threads.values()) == STREAMS
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(spans)
    names = {e["name"] for e in complete}
    for l in range(CFG["num_hidden_layers"]):
        assert {f"forward layer {l} c0", f"backward layer {l} c3", f"weights in layer {l}"} <= names
    assert {"head c0", "forward embedding c0", "backward embedding c3", "grad norm", "adamw head"} <= names
    assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in complete)
    assert {threads[e["tid"]] for e in complete if e["cat"] == "weights in"} == {"inbound"}
    counters = {e["name"]: e["args"] for e in events if e["ph"] == "C"}
    assert set(counters) == {"device memory (bytes)", "host memory (bytes)"}
    assert set(counters["device memory (bytes)"]) == {"in use", "peak"}
    assert trace["otherData"]["plan"]["weight_slots"] == plan.weight_slots


def test_trace_off_and_bad_reads():
    plan = plan_for(CFG, "64MiB", "fp32")
    ex = RingExecutor(df.Handle("host"), LlamaConfig.from_dict(CFG), plan, "fp32")
    with pytest.raises(DataflowError, match=r"nothing recorded; create the executor with trace=True"):
        ex.trace("unused.json")
    ex.start_trace()
    ex.stop_trace()
    spans, samples = ex.trace_events()
    assert spans == [] and len(samples) == 1  # the sample at start_trace; no work, no span
    n = ffi.new("int64_t *")
    with pytest.raises(BadArgumentError, match=r"trace read: .* arrays for max_spans \(5\)"):
        check(lib.dataflow_trace_read(ex._trace._t, ffi.NULL, 5, ffi.NULL, 0, n, n))
    assert ringlib.dataflow_ring_work_name(ringlib.DATAFLOW_RING_NUM_WORK) == ffi.NULL
