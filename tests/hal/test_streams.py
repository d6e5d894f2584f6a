"""Ordering: one stream runs in submission order; only explicit dependencies order streams,
within a handle and across handles; asynchronous failures surface at sync."""
import threading

import numpy as np
import pytest

import dataflow as df

MB = 1 << 20


def slow_handle(streams=2):
    # 4 MiB at 40 MB/s takes ~100 ms: far longer than an unordered op needs to overtake it.
    return df.Handle("host", streams=streams, device_memory="64MiB", transfer_bandwidth="40MB")


def test_cross_stream_dependency_orders_work():
    with slow_handle() as h:
        n = 4 * MB // 4
        src = np.full(n, 3.0, dtype=np.float32)
        a = h.zeros(n, "fp32")
        h.sync()
        h.inbound_transfer(a, src, stream=0)   # throttled: still copying while stream 1 is free
        h.wait(1, h.record(0))
        out = df.ops.add(h, a, a, stream=1)    # must see every byte of the transfer
        h.sync()
        np.testing.assert_array_equal(out.numpy(), np.full(n, 6.0, dtype=np.float32))


def test_cross_handle_event():
    with slow_handle() as h1, df.Handle("host", streams=2, device_memory="64MiB") as h2:
        n = 4 * MB // 4
        src = np.arange(n, dtype=np.float32)
        a1 = h1.zeros(n, "fp32")
        h1.sync()
        a2 = h2.zeros(n, "fp32")
        h2.enable_peer_access(h1)
        h1.inbound_transfer(a1, src, stream=1)
        h2.wait(0, h1.record(1))               # h2's stream 0 waits on h1's stream 1
        h2.peer_transfer(a2, a1, stream=0)
        h2.sync()
        h1.sync()
        np.testing.assert_array_equal(a2.numpy(), src)


def test_same_stream_runs_in_submission_order(h):
    x = h.from_numpy(np.ones(1000, dtype=np.float32))
    seen = []
    for i in range(20):
        df.ops.add(h, x, x, out=x, stream=2)   # doubles x each time
        h.submit_host_op(lambda i=i: seen.append((i, float(h.host_view(x.ptr, 1, "fp32")[0]))), stream=2)
    h.sync()
    assert seen == [(i, 2.0 ** (i + 1)) for i in range(20)]


def test_dependency_chain_across_streams(bh):
    """stream 0 writes, stream 1 adds after waiting, stream 2 reads after waiting."""
    h = bh
    n = 1 << 20
    src = np.arange(n, dtype=np.float32)
    a = h.empty(n, "fp32")
    out = h.empty(n, "fp32")
    back = np.empty(n, np.float32)
    h.inbound_transfer(a, src, stream=0)
    h.wait(1, h.record(0))
    df.ops.add(h, a, a, out=out, stream=1)
    h.wait(2, h.record(1))
    h.outbound_transfer(back, out, stream=2)
    h.sync()
    np.testing.assert_array_equal(back, 2 * src)


def test_cross_handle_event_orders_peer_copy(backend):
    with df.Handle(backend, streams=2, device_memory="64MiB") as h1, \
         df.Handle(backend, streams=2, device_memory="64MiB") as h2:
        src = np.arange(1 << 20, dtype=np.float32)
        a1 = h1.empty(src.shape, "fp32")
        a2 = h2.empty(src.shape, "fp32")
        h2.enable_peer_access(h1)
        h1.inbound_transfer(a1, src, stream=1)
        h2.wait(0, h1.record(1))
        h2.peer_transfer(a2, a1, stream=0)
        h2.sync()
        h1.sync()
        np.testing.assert_array_equal(a2.numpy(), src)


def test_cuda_stale_stream_state_is_a_clear_error():
    from conftest import open_handle
    with open_handle("cuda", streams=2, register_default_ops=False) as h:
        old = h.record(0)
        for _ in range(1024):  # CUDA_EVENT_RING in backends/cuda/src/cuda_backend.h
            h.record(0)
        with pytest.raises(df.BadArgumentError, match="too old"):
            h.wait(1, old)


def test_host_op_runs_on_stream_worker_not_caller(bh):
    h = bh
    threads = []
    h.submit_host_op(lambda: threads.append(threading.get_ident()), stream=1)
    h.sync()
    assert threads and threads[0] != threading.get_ident()


def test_waiting_on_an_already_finished_event_does_not_block(bh):
    h = bh
    ev = h.record(0)
    h.sync()
    h.wait(1, ev)
    h.wait(0, h.record(0))  # a stream waiting on itself is a no-op
    h.sync()


def test_failing_external_op_reported_at_sync_and_handle_survives(h):
    def boom(ptr):
        raise ValueError("kaboom from python")
    op = h.register_external_op("boom", ["fp32"], boom)
    x = h.from_numpy(np.arange(4, dtype=np.float32))
    op(x, stream=1)
    with pytest.raises(df.DataflowError, match="kaboom from python"):
        h.sync()
    h.sync()  # the error was reported once; the handle keeps working
    np.testing.assert_array_equal(x.numpy(), np.arange(4, dtype=np.float32))


def test_sync_from_own_worker_is_an_error_not_a_deadlock(h):
    errors = []

    def inner():
        try:
            h.sync(stream=0)
        except df.DataflowError as e:
            errors.append(str(e))
    h.submit_host_op(inner, stream=0)
    h.sync()
    assert errors and "own worker" in errors[0]


def test_idle_handles_compute_runs_on_the_submitter_and_queued_work_keeps_its_order():
    """An idle handle's op runs at once on the submitting thread (no hand-off to the worker); behind
    queued work the next op queues on the stream's worker and runs after that work, in order."""
    with df.Handle("host", streams=2, device_memory="16MiB", register_default_ops=False) as h:
        ran = []
        op = h.register_external_op("note", ["fp32"], lambda ptr: ran.append(("op", threading.get_ident())))
        x = h.empty(1)
        me = threading.get_ident()
        op(x, stream=0)
        assert ran == [("op", me)]  # before any sync: it ran inside the submission
        gate = threading.Event()
        h.submit_host_op(lambda: (gate.wait(10), ran.append(("host", threading.get_ident()))), stream=0)
        op(x, stream=0)
        assert ran == [("op", me)]  # queued behind the host op, which waits for the gate
        gate.set()
        h.sync()
        worker = ran[1][1]
        assert ran == [("op", me), ("host", worker), ("op", worker)] and worker != me
        op(x, stream=1)  # idle again: on the submitter
        assert ran[-1] == ("op", me)
