"""What a handle's queued work needs from Python, safe to use from several threads.

- Host objects (numpy buffers of transfers, host-op jobs) stay referenced until a sync that
  began after their submission returned has passed their stream: a sync releases only what was
  submitted before it began, never what another thread queued meanwhile.
- Exceptions raised by Python callbacks on stream workers (host ops, Python external ops) are
  kept per stream and raised once, by the next successful sync covering that stream.
- Which handle and stream a thread is running a Python callback for, so that the handle can
  refuse to be closed from its own worker.
"""
import threading
from collections import deque

from .errors import CallbackError



class QueuedWork:
    def __init__(self, num_streams):
        # Never held while calling C or waiting: stream workers take it to record exceptions.
        self._lock = threading.Lock()
        self._keeps = 0  # keeps so far: entry n was submitted before a sync that read >= n
        self._held = 0   # entries and exceptions held, for the syncs' fast path
        self._kept = [deque() for _ in range(num_streams)]  # (n, object), n increasing
        self._errors = [[] for _ in range(num_streams)]    # (what ran, exception), in order

    def keep(self, stream, obj):
        """After a submission to `stream` returned: holds obj until a later sync passes it."""
        with self._lock:
            self._keeps += 1
            self._held += 1
            self._kept[stream].append((self._keeps, obj))

    def begin_sync(self):
        """Read before the C sync: the entries it covers are those kept so far."""
        return self._keeps

    def end_sync(self, streams, covered):
        """After a successful C sync of `streams` that began when `covered` entries were kept:
        releases those of them on `streams` and raises the exceptions callbacks raised on
        `streams` (each once). Entries and exceptions that arrive meanwhile wait for a later sync."""
        if not self._held:
            return
        released, errors = [], []
        with self._lock:
            for s in streams:
                kept = self._kept[s]
                while kept and kept[0][0] <= covered:
                    released.append(kept.popleft())
                if self._errors[s]:
                    errors += [(s, what, e) for what, e in self._errors[s]]
                    self._errors[s] = []
            self._held -= len(released) + len(errors)
        del released  # dropped outside the lock: finalizers may run
        if errors:
            stream, what, first = errors[0]
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise CallbackError(f"stream {stream}: {what} raised {type(first).__name__}: {first}{more}") from first

    def run(self, stream, what, fn, *args):
        """Runs a Python callback on a stream worker: an exception is kept for the next sync and
        never returns to the C caller. `what` names the callback (a string or a callable)."""
        try:
            fn(*args)
        except BaseException as e:  # noqa: BLE001 - reported by the next sync, as the contract says
            name = what if isinstance(what, str) else f"host op {getattr(what, '__qualname__', what)!r}"
            with self._lock:
                self._held += 1
                self._errors[stream].append((name, e))

    def clear(self):
        """After the handle is destroyed: nothing queued remains; unreported exceptions go too."""
        with self._lock:
            kept, self._kept = self._kept, [deque() for _ in self._kept]
            self._errors = [[] for _ in self._errors]
            self._held = 0
        del kept  # dropped outside the lock: finalizers may run
