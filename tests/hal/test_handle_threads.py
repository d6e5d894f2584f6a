"""A Handle used from several threads: a sync releases only the host buffers and callbacks of
work submitted before it, so one thread's sync never frees what another thread queued."""
import threading

import numpy as np

import dataflow as df

STREAMS = 4


def test_syncs_on_some_threads_keep_what_other_threads_queued():
    """Submitter threads queue transfers and host ops whose buffers and callbacks only the handle
    references, while syncer threads call sync() and sync(stream) in a loop; every round trip
    must come back intact and every host op must run once, seeing its data."""
    # the throttle keeps transfers queued behind each other, so syncs overlap queued work
    with df.Handle("host", streams=STREAMS, device_memory="64MiB", transfer_bandwidth="2GB") as h:
        n = 64 * 1024  # 256 KiB: numpy maps it, so a buffer released too early faults or is reused
        rounds, submitters = 50, 4
        bad, seen = [], []
        done = threading.Event()
        start = threading.Barrier(submitters + 2)

        def submitter(t):
            stream = t % STREAMS
            dev = h.empty(n, "fp32")
            start.wait()
            for r in range(rounds):
                value = float(t * 1000 + r)
                back = np.empty(n, np.float32)
                h.inbound_transfer(dev, np.full(n, value, np.float32), stream=stream)  # source: the handle's only
                h.outbound_transfer(back, dev, stream=stream)
                # the callback and its closure are referenced by the handle alone
                h.submit_host_op(lambda back=back, value=value: seen.append(bool((back == value).all())),
                                 stream=stream)
                del back
                if r % 5 == 4:
                    h.sync(stream)
            h.sync(stream)

        def syncer(whole):
            start.wait()
            i = 0
            while not done.is_set():
                if whole:
                    h.sync()
                else:
                    h.sync(i % STREAMS)
                i += 1

        def guarded(fn, *args):
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - reported by the assertion below
                bad.append(e)

        workers = [threading.Thread(target=guarded, args=(submitter, t)) for t in range(submitters)]
        syncers = [threading.Thread(target=guarded, args=(syncer, whole)) for whole in (True, False)]
        for th in workers + syncers:
            th.start()
        for th in workers:
            th.join()
        done.set()
        for th in syncers:
            th.join()
        h.sync()
        assert bad == []
        assert len(seen) == rounds * submitters and all(seen)


def test_sync_of_one_stream_keeps_buffers_of_another():
    with df.Handle("host", streams=2, device_memory="64MiB", transfer_bandwidth="200MB") as h:
        n = 1 << 20
        slow = h.empty(n, "fp32")
        dev = h.empty(n, "fp32")
        h.inbound_transfer(slow, np.zeros(n, np.float32), stream=1)  # ~20 ms: what follows waits
        h.inbound_transfer(dev, np.arange(n, dtype=np.float32), stream=1)
        h.sync(0)  # must not release stream 1's sources
        back = np.empty(n, np.float32)
        h.outbound_transfer(back, dev, stream=1)
        h.sync(1)
        np.testing.assert_array_equal(back, np.arange(n, dtype=np.float32))

