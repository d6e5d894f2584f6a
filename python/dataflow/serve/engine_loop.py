"""One background thread that owns a BatchEngine and steps it while any request is unfinished,
so that concurrent requests share decode steps. Requests and cancellations reach it through an
inbox; each request's events go to its sink (a callable the HTTP side gives, e.g. one posting to
an asyncio queue), in order:
  ("added", rid) or ("error", exception), then ("token", id, logprob) per new token, then
  ("done", Completion), or ("error", exception) when the engine fails. A cancelled request
  gets nothing more after the cancellation."""
import collections
import threading


class EngineLoop:
    def __init__(self, engine):
        self.engine = engine
        self._inbox = collections.deque()
        self._wake = threading.Condition()
        self._sinks = {}
        self._stopping = self._closed = False
        self.failure = None  # the exception that ended the thread, if one did
        self.cancelled = 0  # requests dropped by cancel() before they finished
        self.stats = self._stats()
        self._thread = threading.Thread(target=self._run, name="dataflow-serve-engine", daemon=True)

    def start(self):
        self._thread.start()

    def _post(self, item):
        with self._wake:
            self._inbox.append(item)
            self._wake.notify()

    def submit(self, sink, **add):
        """Queues a request (add: BatchEngine.add's arguments); its events go to sink."""
        with self._wake:
            if self._closed or self._stopping:
                self._refuse(sink)
                return
            self._inbox.append(("add", sink, add))
            self._wake.notify()

    def _refuse(self, sink):
        sink(("error", RuntimeError(f"the engine is not running ({self.failure or 'stopped'})")))

    def cancel(self, sink):
        """Drops the request of that sink (submitted before): its sequence and pages go back to the
        pool before the next step. The inbox is in order, so the request is in the engine by then."""
        self._post(("cancel", sink))

    def stop(self):
        """Ends the thread after the current step; requests still unfinished are dropped."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join()

    def _stats(self):
        cache = self.engine.cache
        return {"free_pages": cache.free_pages, "num_pages": cache.num_pages, "running": self.engine.running,
                "waiting": self.engine.waiting, "cancelled": self.cancelled,
                "memory_in_use": self.engine.model.handle.memory_in_use()}

    def _take_inbox(self):
        with self._wake:
            while not self._inbox and not self.engine.pending and not self._stopping:
                self._wake.wait()
            work, self._inbox = self._inbox, collections.deque()
            return work

    def _handle(self, item):
        if item[0] == "cancel":
            rid = next((rid for rid, sink in self._sinks.items() if sink is item[1]), None)
            if rid is not None:
                del self._sinks[rid]
                self.cancelled += self.engine.cancel(rid)
            return
        _, sink, add = item
        try:
            rid = self.engine.add(**add)
        except Exception as e:  # a request the engine refuses: its sink gets the reason
            sink(("error", e))
            return
        self._sinks[rid] = sink
        sink(("added", rid))

    def _run(self):
        try:
            while not self._stopping:
                for item in self._take_inbox():
                    self._handle(item)
                if self.engine.pending:
                    for rid, token, logprob in self.engine.step():
                        self._sinks[rid](("token", token, logprob))
                for rid in [rid for rid in self._sinks if self.engine.finished(rid)]:
                    self._sinks.pop(rid)(("done", self.engine.take(rid)))
                self.stats = self._stats()
        except Exception as e:  # the engine broke (e.g. the device): every waiting request hears of it
            self.failure = e
            for sink in self._sinks.values():
                sink(("error", e))
        finally:
            for rid in self._sinks:
                self.engine.cancel(rid)
            self._sinks.clear()
            with self._wake:  # what came in meanwhile is refused, and so is all that comes later
                self._closed = True
                late, self._inbox = self._inbox, collections.deque()
            for item in late:
                if item[0] == "add":
                    self._refuse(item[1])
            self.stats = self._stats()
