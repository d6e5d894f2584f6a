"""BatchEngine: continuous batching of generation requests over a PagedKVCache.

Requests join (add) and leave (when they stop) between steps. A step runs, in one batched
forward (dataflow_llama_forward_paged), one new token of every decoding sequence and a chunk
of at most prefill_chunk prompt tokens of the sequences still reading their prompts, within
max_batch_tokens. A request is admitted only when the pool can hold its whole length
(prompt + max_new_tokens - 1), so a step never runs out of pages. Each sequence's logits
depend on its own tokens only (paged_attention splits by key position, rows of the matmuls are
independent), so greedy output does not depend on what else is in the batch.
"""
import collections
import dataclasses
import numbers

import numpy as np

from ..errors import BadArgumentError
from .batch import check_tokens
from .sampling import SamplingParams, sample_batch

GREEDY = SamplingParams(temperature=0)


@dataclasses.dataclass
class Completion:
    """A finished request: its new tokens, their logprobs (log_softmax of the raw logits) and
    why it stopped: "stop" (a stop id or string; stop_string names the string) or "length"."""
    tokens: np.ndarray
    logprobs: np.ndarray
    finish_reason: str
    stop_string: str = None


class _Request:
    def __init__(self, rid, prompt, max_new_tokens, sampling, seed, stop_ids, stop_strings):
        self.rid, self.prompt, self.max_new_tokens = rid, prompt, max_new_tokens
        self.sampling, self.state, self.stop_ids, self.stop_strings = sampling, seed, stop_ids, stop_strings
        self.seq, self.fed, self.tokens, self.logprobs = None, 0, [], []
        self.finish_reason, self.stop_string = None, None

    @property
    def length(self):
        """Tokens its sequence will hold at most (the last sampled token is never fed back)."""
        return self.prompt.size + self.max_new_tokens - 1

    def next_input(self, budget, prefill_chunk):
        """The tokens to feed next: a prompt chunk, or the last sampled token."""
        if self.fed < self.prompt.size:
            return self.prompt[self.fed:self.fed + min(budget, prefill_chunk)]
        return np.asarray(self.tokens[-1:], np.int32)


def _completion(r):
    return Completion(np.asarray(r.tokens, np.int64), np.asarray(r.logprobs, np.float32), r.finish_reason,
                      r.stop_string)


class BatchEngine:
    """Generation of many requests at once over one PagedKVCache of `model` (its arguments:
    num_pages defaults to room for max_seqs sequences of max_seq_tokens)."""

    def __init__(self, model, num_pages=None, page_size=16, max_seqs=16, max_seq_tokens=None, max_batch_tokens=256,
                 prefill_chunk=None, decode=None):
        max_seq_tokens = model.config.max_position_embeddings if max_seq_tokens is None else max_seq_tokens
        if num_pages is None and all(isinstance(v, numbers.Integral) for v in (max_seq_tokens, page_size)):
            num_pages = max_seqs * -(-max_seq_tokens // max(page_size, 1))
        self.cache = model.paged_kv_cache(num_pages, page_size, max_seqs, max_seq_tokens, max_batch_tokens)
        prefill_chunk = max_batch_tokens if prefill_chunk is None else prefill_chunk
        if isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, numbers.Integral) or prefill_chunk < 1:
            raise BadArgumentError(f"BatchEngine: prefill_chunk must be an integer >= 1, got {prefill_chunk!r:.40}")
        self.model, self.prefill_chunk, self.decode = model, int(prefill_chunk), decode
        self._waiting, self._running, self._done = collections.deque(), [], {}
        self._next_rid = 0
        self._reserved_pages = 0

    def _pages(self, tokens):
        return -(-tokens // self.cache.page_size)

    def add(self, prompt_ids, max_new_tokens, sampling=GREEDY, seed=0, stop_ids=(), stop_strings=()):
        """Queues a request; returns its id. sampling: a SamplingParams (default greedy), drawn in
        C from the request's own seed (dataflow.models.sampling). Generation stops after a token of
        stop_ids, once the text (the engine's decode of the new tokens) holds one of
        stop_strings, or after max_new_tokens tokens."""
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral) or max_new_tokens < 0:
            raise BadArgumentError(f"BatchEngine.add: max_new_tokens must be an integer >= 0, "
                                   f"got {max_new_tokens!r:.40}")
        if not isinstance(sampling, SamplingParams):
            raise BadArgumentError(f"BatchEngine.add: sampling must be a SamplingParams, got {type(sampling).__name__}")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2 ** 64:
            raise BadArgumentError(f"BatchEngine.add: seed must be an integer in [0, 2^64), got {seed!r:.40}")
        stop_strings = tuple(stop_strings)
        if stop_strings and (self.decode is None or not all(isinstance(t, str) and t for t in stop_strings)):
            raise BadArgumentError("BatchEngine.add: stop_strings must be non-empty strings, and the engine needs "
                                   "decode (token ids -> text) to see them")
        prompt = check_tokens(prompt_ids, self.model.config.vocab_size, "BatchEngine.add: prompt_ids")
        stop_ids = frozenset(int(t) for t in stop_ids)
        r = _Request(self._next_rid, prompt, int(max_new_tokens), sampling, int(seed), stop_ids, stop_strings)
        if r.length > self.cache.max_seq_tokens:
            raise BadArgumentError(f"BatchEngine.add: prompt ({prompt.size} tokens) + max_new_tokens "
                                   f"({max_new_tokens}) - 1 exceeds max_seq_tokens {self.cache.max_seq_tokens}")
        if self._pages(r.length) > self.cache.num_pages:
            raise BadArgumentError(f"BatchEngine.add: the request needs {self._pages(r.length)} pages, the pool has "
                                   f"{self.cache.num_pages}")
        self._next_rid += 1
        if r.max_new_tokens == 0:
            r.finish_reason = "length"
            self._done[r.rid] = r
        else:
            self._waiting.append(r)
        return r.rid

    @property
    def pending(self):
        """Requests not finished yet."""
        return len(self._waiting) + len(self._running)

    @property
    def running(self):
        """Requests holding a sequence in the cache."""
        return len(self._running)

    @property
    def waiting(self):
        """Requests queued for a sequence."""
        return len(self._waiting)

    def finished(self, rid):
        """Whether the request has finished (and take() has not yet collected it)."""
        return rid in self._done

    def _admit(self):
        while self._waiting and len(self._running) < self.cache.max_seqs and \
                self._reserved_pages + self._pages(self._waiting[0].length) <= self.cache.num_pages:
            r = self._waiting.popleft()
            r.seq = self.cache.add_sequence()
            self._reserved_pages += self._pages(r.length)
            self._running.append(r)

    def _finish(self, r):
        self.cache.free_sequence(r.seq)
        self._reserved_pages -= self._pages(r.length)
        self._running.remove(r)
        self._done[r.rid] = r

    def step(self):
        """One batched forward; returns [(request id, new token, its logprob), ...] of this step."""
        self._admit()
        if not self._running:
            return []
        budget, plan = self.cache.max_batch_tokens, []
        # decoding sequences first (one token each), then prompt chunks in arrival order
        for r in sorted(self._running, key=lambda r: r.fed < r.prompt.size):
            if budget == 0:
                break
            ids = r.next_input(budget, self.prefill_chunk)
            plan.append((r, ids))
            budget -= ids.size
        logits = self.cache.forward([(r.seq, ids) for r, ids in plan])
        rows, reqs = [], []
        for i, (r, ids) in enumerate(plan):
            if r.fed < r.prompt.size:
                r.fed += ids.size
                if r.fed < r.prompt.size:
                    continue  # more of the prompt to read
            rows.append(i)
            reqs.append(r)
        if not reqs:
            return []
        states = np.array([r.state for r in reqs], np.uint64)
        tokens, logprobs = sample_batch(logits[rows, :self.model.config.vocab_size], [r.sampling for r in reqs],
                                        [np.concatenate([r.prompt, np.asarray(r.tokens, np.int32)]) for r in reqs],
                                        [r.prompt.size for r in reqs], states)
        emitted = []
        for r, token, logprob, state in zip(reqs, tokens.tolist(), logprobs.tolist(), states.tolist()):
            r.state = state
            r.tokens.append(token)
            r.logprobs.append(logprob)
            emitted.append((r.rid, token, logprob))
            self._check_stop(r, token)
            if r.finish_reason:
                self._finish(r)
        return emitted

    def cancel(self, rid):
        """Drops an unfinished request (its pages go back to the pool); True if it was unfinished.
        A cancelled request leaves no result."""
        waiting = next((r for r in self._waiting if r.rid == rid), None)
        if waiting is not None:
            self._waiting.remove(waiting)
            return True
        running = next((r for r in self._running if r.rid == rid), None)
        if running is None:
            return False
        self._finish(running)
        del self._done[rid]
        return True

    def _check_stop(self, r, token):
        if token in r.stop_ids:
            r.finish_reason = "stop"
        elif r.stop_strings:
            text = self.decode(r.tokens)
            r.stop_string = next((s for s in r.stop_strings if s in text), None)
            r.finish_reason = "stop" if r.stop_string else None
        if not r.finish_reason and len(r.tokens) == r.max_new_tokens:
            r.finish_reason = "length"

    def run(self):
        """Steps until every request is finished; returns results()."""
        while self.pending:
            self.step()
        return self.results()

    def results(self):
        """{request id: Completion} of the finished requests."""
        return {rid: _completion(r) for rid, r in self._done.items()}

    def take(self, rid):
        """The finished request's Completion, forgotten by the engine (a server's engine runs for
        good: results() would keep every request it ever served)."""
        return _completion(self._done.pop(rid))

    def close(self):
        self.cache.close()


def generate_batch(model, prompts, max_new_tokens, sampling=GREEDY, seed=0, stop_ids=(), **engine):
    """The new tokens of each prompt (a list of int64 arrays) from one BatchEngine (engine:
    its keyword arguments); request i draws from seed + i."""
    eng = BatchEngine(model, **engine)
    try:
        rids = [eng.add(p, max_new_tokens, sampling, seed + i, stop_ids) for i, p in enumerate(prompts)]
        out = eng.run()
        return [out[rid].tokens for rid in rids]
    finally:
        eng.close()
