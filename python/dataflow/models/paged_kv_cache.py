"""PagedKVCache: keys and values of many sequences in fixed-size pages, for batched decoding."""
import numbers

import numpy as np

from .._ffi import ffi, modelslib
from ..errors import BadArgumentError, check
from .batch import check_tokens
from .device_io import fetch
from .kv_cache import ModelCache


def _positive(value, what):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise BadArgumentError(f"PagedKVCache: {what} must be an integer >= 1, got {value!r:.40}")
    return int(value)


class PagedKVCache(ModelCache):
    """A page pool on the model's handle (C: dataflow_llama_paged_cache_*, under the handle's
    memory ledger) shared by up to max_seqs sequences of up to max_seq_tokens tokens each; a
    step (forward) runs up to max_batch_tokens new tokens of several sequences. Sequences take
    pages as they grow and give them all back when freed (free_pages counts them). Valid
    while its model lives (closed with it)."""

    def __init__(self, model, num_pages, page_size=16, max_seqs=16, max_seq_tokens=None, max_batch_tokens=256):
        max_seq_tokens = model.config.max_position_embeddings if max_seq_tokens is None else max_seq_tokens
        args = [_positive(v, n) for v, n in ((num_pages, "num_pages"), (page_size, "page_size"),
                                               (max_seqs, "max_seqs"), (max_seq_tokens, "max_seq_tokens"),
                                               (max_batch_tokens, "max_batch_tokens"))]
        self.model = model
        self.num_pages, self.page_size, self.max_seqs, self.max_seq_tokens, self.max_batch_tokens = args
        out = ffi.new("Dataflow_Llama_Paged_Cache **")
        check(modelslib.dataflow_llama_paged_cache_create(model._m, *args, out))
        self._c = out[0]
        self._logits = model.handle.empty((self.max_seqs, model.config.vocab_size), model.dtype)
        model._caches.add(self)

    _destroy = staticmethod(lambda c: modelslib.dataflow_llama_paged_cache_destroy(c))

    @property
    def free_pages(self):
        return int(modelslib.dataflow_llama_paged_cache_free_pages(self._ptr()))

    def add_sequence(self):
        """A new empty sequence's id."""
        seq = ffi.new("int64_t *")
        check(modelslib.dataflow_llama_paged_cache_add_sequence(self._ptr(), seq))
        return int(seq[0])

    def free_sequence(self, seq):
        """Returns the sequence's pages to the pool."""
        check(modelslib.dataflow_llama_paged_cache_free_sequence(self._ptr(), int(seq)))

    def length(self, seq):
        n = int(modelslib.dataflow_llama_paged_cache_length(self._ptr(), int(seq)))
        if n < 0:
            raise BadArgumentError(f"PagedKVCache.length: sequence {seq!r:.40} is not alive")
        return n

    def forward(self, steps, stream=0):
        """One batched step: steps is [(seq, new token ids), ...]; returns the logits (numpy
        float32 [len(steps), vocab]) of each sequence's last new token."""
        c = self._ptr()
        if not steps:
            raise BadArgumentError("PagedKVCache.forward: steps must name at least one sequence")
        vocab = self.model.config.vocab_size
        seqs, counts, chunks = [], [], []
        for i, (seq, ids) in enumerate(steps):
            ids = check_tokens(ids, vocab, f"PagedKVCache.forward: steps[{i}]")
            seqs.append(int(seq))
            counts.append(ids.size)
            chunks.append(ids)
        if len(steps) > self.max_seqs:
            raise BadArgumentError(f"PagedKVCache.forward: {len(steps)} sequences in one step exceed max_seqs "
                                   f"{self.max_seqs}")
        tokens = np.ascontiguousarray(np.concatenate(chunks))
        out = self._logits.view((len(steps), vocab))
        self.model._on(stream)
        check(modelslib.dataflow_llama_forward_paged(
            self.model._m, stream, c, len(steps), ffi.from_buffer("int64_t[]", np.asarray(seqs, np.int64)),
            ffi.from_buffer("int64_t[]", np.asarray(counts, np.int64)), ffi.from_buffer("int32_t[]", tokens),
            out.cdata))
        return fetch(out, stream)

    def close(self):
        super().close()
        logits, self._logits = getattr(self, "_logits", None), None
        if logits is not None and self.model.handle._alive():
            logits.free()
