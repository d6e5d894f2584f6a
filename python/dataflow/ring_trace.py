"""A ring executor's trace (ring_executor.h "Trace") as Chrome trace-event JSON, which Perfetto
(ui.perfetto.dev) and chrome://tracing open: one track per stream (compute, inbound, outbound,
optimizer) holding a complete event ("ph": "X") per unit of work the stream ran, and counter
tracks ("ph": "C") for device memory (in use, peak) and the executor's host memory, sampled
when the executor's queued work has been waited for (once per step in training)."""
import json

from . import atomic
from ._ffi import ffi, ringlib
from .errors import check

STREAMS = ("compute", "inbound", "outbound", "optimizer")


def read(executor):
    """(spans, samples) recorded by the executor (a Dataflow_Ring_Executor *): spans as dicts
    {stream, what, block, chunk, bytes, step, start, end} (seconds, CLOCK_MONOTONIC) in
    submission order, samples as {time, step, device_in_use, device_peak, host_in_use}."""
    n_spans, n_samples = ffi.new("int64_t *"), ffi.new("int64_t *")
    check(ringlib.dataflow_ring_executor_trace_read(executor, ffi.NULL, 0, ffi.NULL, 0, n_spans, n_samples))
    spans = ffi.new("Dataflow_Ring_Trace_Span[]", max(1, n_spans[0]))
    samples = ffi.new("Dataflow_Ring_Trace_Memory[]", max(1, n_samples[0]))
    check(ringlib.dataflow_ring_executor_trace_read(executor, spans, n_spans[0], samples, n_samples[0], n_spans,
                                                    n_samples))
    names = {}

    def name(what):
        if what not in names:
            names[what] = ffi.string(ringlib.dataflow_ring_work_name(what)).decode()
        return names[what]

    out_spans = [dict(stream=STREAMS[s.stream], what=name(s.what), block=s.block, chunk=s.chunk, bytes=s.bytes,
                      step=s.step, start=s.start, end=s.end) for s in spans[0:n_spans[0]]]
    out_samples = [dict(time=m.time, step=m.step, device_in_use=m.device_in_use, device_peak=m.device_peak,
                        host_in_use=m.host_in_use) for m in samples[0:n_samples[0]]]
    return out_spans, out_samples


def block_name(block, num_blocks):
    if block < 0:
        return ""
    return "embedding" if block == 0 else "head" if block == num_blocks - 1 else f"layer {block - 1}"


def chrome(spans, samples, num_blocks, metadata=None):
    """The trace-event dict: times in microseconds from the earliest span or sample. Spans a
    failed call left without an end are left out."""
    spans = [s for s in spans if s["end"] >= s["start"] > 0]
    t0 = min([s["start"] for s in spans] + [m["time"] for m in samples], default=0.0)
    us = lambda t: round((t - t0) * 1e6, 3)
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "dataflow ring executor"}}]
    for tid, stream in enumerate(STREAMS):
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": stream}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": tid, "args": {"sort_index": tid}})
    for s in spans:
        where = block_name(s["block"], num_blocks)
        where = "" if where == s["what"] else where  # "head c0", not "head head c0"
        name = " ".join(p for p in (s["what"], where, f"c{s['chunk']}" if s["chunk"] >= 0 else "") if p)
        args = {"step": s["step"], "block": s["block"], "chunk": s["chunk"]}
        if s["bytes"]:
            args["bytes"] = s["bytes"]
        events.append({"ph": "X", "name": name, "cat": s["what"], "pid": 1, "tid": STREAMS.index(s["stream"]),
                       "ts": us(s["start"]), "dur": round((s["end"] - s["start"]) * 1e6, 3), "args": args})
    for m in samples:
        events.append({"ph": "C", "name": "device memory (bytes)", "pid": 1, "ts": us(m["time"]),
                       "args": {"in use": m["device_in_use"], "peak": m["device_peak"]}})
        events.append({"ph": "C", "name": "host memory (bytes)", "pid": 1, "ts": us(m["time"]),
                       "args": {"in use": m["host_in_use"]}})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": metadata or {}}


def write(path, trace):
    """Writes the trace-event dict to path as JSON, atomically."""
    with atomic.replaced_file(path) as tmp:
        with open(tmp, "w") as f:
            json.dump(trace, f)
