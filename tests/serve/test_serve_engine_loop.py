"""dataflow.serve.engine_loop.EngineLoop: the engine thread behind `dataflow serve`. Events per
request in order (added, a token per step with its logprob, done) with the BatchEngine's own
tokens; a cancelled request frees its pages and hears nothing more; a refused request and an
engine failure reach the requests as errors, and a failed loop refuses new ones at once."""
import threading
import time

import numpy as np
import pytest

import dataflow as df
from dataflow.models.batch_engine import BatchEngine, generate_batch
from dataflow.serve.engine_loop import EngineLoop
from hf_llama import prompt_for, sharp_model

ENGINE = dict(page_size=4, max_seqs=3, max_seq_tokens=40, max_batch_tokens=16)


class Sink:
    """Collects a request's events; waits for the one that ends it."""

    def __init__(self):
        self.events, self._cond = [], threading.Condition()

    def __call__(self, event):
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def wait_for(self, kinds, timeout=30):
        with self._cond:
            assert self._cond.wait_for(lambda: any(e[0] in kinds for e in self.events), timeout), self.events
        return self.events


@pytest.fixture
def model(h):
    model, _ = sharp_model(h, "gqa_untied")
    yield model
    model.close()


def until(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_events_carry_the_engines_tokens(model):
    prompts = [prompt_for(model, n, seed=n) for n in (3, 9, 5, 7)]
    want = generate_batch(model, prompts, 8, **ENGINE)
    loop = EngineLoop(BatchEngine(model, **ENGINE))
    loop.start()
    sinks = [Sink() for _ in prompts]
    for sink, p in zip(sinks, prompts):  # 4 requests, 3 sequences at a time
        loop.submit(sink, prompt_ids=p, max_new_tokens=8)
    for sink, w in zip(sinks, want):
        events = sink.wait_for({"done"})
        assert events[0][0] == "added" and [e[0] for e in events[1:]] == ["token"] * 8 + ["done"]
        done = events[-1][1]
        np.testing.assert_array_equal([e[1] for e in events[1:-1]], w)
        np.testing.assert_array_equal(done.tokens, w)
        np.testing.assert_array_equal([e[2] for e in events[1:-1]], done.logprobs)
    until(lambda: loop.stats["free_pages"] == loop.stats["num_pages"] and loop.stats["running"] == 0)
    loop.stop()
    loop.engine.close()


def test_cancel_frees_the_pages_and_ends_the_events(model):
    loop = EngineLoop(BatchEngine(model, **{**ENGINE, "max_seq_tokens": 400}))
    loop.start()
    sink, refused = Sink(), Sink()
    loop.submit(sink, prompt_ids=prompt_for(model, 4), max_new_tokens=390)  # far from its end when cancelled
    loop.submit(refused, prompt_ids=prompt_for(model, 300), max_new_tokens=200)
    assert isinstance(refused.wait_for({"error"})[0][1], df.BadArgumentError)
    sink.wait_for({"token"})
    loop.cancel(sink)
    until(lambda: loop.stats["cancelled"] == 1)  # stats of the same pass as the cancellation
    assert (loop.stats["free_pages"], loop.stats["running"]) == (loop.stats["num_pages"], 0)
    seen = len(sink.events)
    time.sleep(0.1)
    assert len(sink.events) == seen and sink.events[-1][0] == "token"
    loop.stop()
    loop.engine.close()


def test_an_engine_failure_reaches_every_request(model):
    engine = BatchEngine(model, **ENGINE)
    step = engine.step
    calls = []

    def failing_step():
        calls.append(1)
        if len(calls) == 3:
            raise df.DataflowError("device lost")
        return step()
    engine.step = failing_step
    loop = EngineLoop(engine)
    loop.start()
    sinks = [Sink(), Sink()]
    for sink in sinks:
        loop.submit(sink, prompt_ids=prompt_for(model, 3), max_new_tokens=20)
    for sink in sinks:
        assert "device lost" in str(sink.wait_for({"error"})[-1][1])
    assert "device lost" in str(loop.failure)
    late = Sink()
    loop.submit(late, prompt_ids=prompt_for(model, 3), max_new_tokens=2)
    assert "not running" in str(late.wait_for({"error"})[0][1])
    until(lambda: loop.stats["free_pages"] == loop.stats["num_pages"])
    loop.stop()
    engine.close()
