"""Traces of training (libdataflow/include/dataflow/trace.h) as Chrome trace-event JSON, which
Perfetto (ui.perfetto.dev) and chrome://tracing open: one track per stream holding a complete
event ("ph": "X") per unit of work the stream ran, timed by the stream itself, and counter tracks
("ph": "C") for device memory (in use, peak) and host memory, sampled when the steps' work has
been waited for (once per step in training). Recorded by the all-resident model
(Trainer.start_trace) and by the ring executor (RingExecutor.start_trace)."""
import json
import os

from .io import atomic
from ._ffi import ffi, lib
from .errors import check


class Trace:
    """A recorder (Dataflow_Trace). Attach it to what submits the work, start() it, wait for
    the work, then read()."""

    def __init__(self):
        out = ffi.new("Dataflow_Trace **")
        check(lib.dataflow_trace_create(out))
        self._t = ffi.gc(out[0], lib.dataflow_trace_destroy)

    def start(self):
        """Drops any recording and records from now on (the work that stamps the old spans must be done)."""
        check(lib.dataflow_trace_start(self._t))

    def stop(self):
        lib.dataflow_trace_stop(self._t)

    @property
    def recording(self):
        return bool(lib.dataflow_trace_recording(self._t))

    def sample(self, handle, host_in_use):
        """A memory sample now: the handle's device memory and host_in_use bytes (while recording)."""
        check(lib.dataflow_trace_sample(self._t, handle._ptr(), int(host_in_use)))

    def read(self, work_name, stream_name):
        """(spans, samples) recorded: spans as dicts {stream, what, block, chunk, bytes, step, start,
        end} (seconds, CLOCK_MONOTONIC) in submission order, the stream named by stream_name(track)
        and the work by work_name(code) (a C name function); samples as {time, step, device_in_use,
        device_peak, host_in_use}. Read once the recorded work is done."""
        n_spans, n_samples = ffi.new("int64_t *"), ffi.new("int64_t *")
        check(lib.dataflow_trace_read(self._t, ffi.NULL, 0, ffi.NULL, 0, n_spans, n_samples))
        spans = ffi.new("Dataflow_Trace_Span[]", max(1, n_spans[0]))
        samples = ffi.new("Dataflow_Trace_Memory[]", max(1, n_samples[0]))
        check(lib.dataflow_trace_read(self._t, spans, n_spans[0], samples, n_samples[0], n_spans, n_samples))
        names = {}

        def name(what):
            if what not in names:
                names[what] = ffi.string(work_name(what)).decode()
            return names[what]

        out_spans = [dict(stream=stream_name(s.stream), what=name(s.what), block=s.block, chunk=s.chunk,
                          bytes=s.bytes, step=s.step, start=s.start, end=s.end) for s in spans[0:n_spans[0]]]
        out_samples = [dict(time=m.time, step=m.step, device_in_use=m.device_in_use, device_peak=m.device_peak,
                            host_in_use=m.host_in_use) for m in samples[0:n_samples[0]]]
        return out_spans, out_samples


def resident_bytes():
    """This process's resident memory (Linux /proc/self/statm; 0 where it is not there)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def block_name(block, num_blocks):
    if block < 0:
        return ""
    return "embedding" if block == 0 else "head" if block == num_blocks - 1 else f"layer {block - 1}"


def chrome(spans, samples, streams, num_blocks, process, metadata=None):
    """The trace-event dict: a track per name in `streams` (in that order), times in
    microseconds from the earliest span or sample. Spans a failed call left without an end are
    left out."""
    spans = [s for s in spans if s["end"] >= s["start"] > 0]
    t0 = min([s["start"] for s in spans] + [m["time"] for m in samples], default=0.0)
    us = lambda t: round((t - t0) * 1e6, 3)
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": process}}]
    for tid, stream in enumerate(streams):
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": stream}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": tid, "args": {"sort_index": tid}})
    for s in spans:
        where = block_name(s["block"], num_blocks)
        where = "" if where == s["what"] else where  # "head c0", not "head head c0"
        name = " ".join(p for p in (s["what"], where, f"c{s['chunk']}" if s["chunk"] >= 0 else "") if p)
        args = {"step": s["step"], "block": s["block"], "chunk": s["chunk"]}
        if s["bytes"]:
            args["bytes"] = s["bytes"]
        events.append({"ph": "X", "name": name, "cat": s["what"], "pid": 1, "tid": streams.index(s["stream"]),
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
