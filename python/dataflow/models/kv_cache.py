"""KVCache: keys and values of one sequence for a Llama's incremental decoding."""
import numbers

from .._ffi import ffi, modelslib
from ..errors import BadArgumentError, check, open_pointer
from .batch import check_tokens
from .device_io import fetch


class ModelCache:
    """What a model's caches share: a C object (self._c) valid while the model lives, closed
    with it (model._caches), destroyed by self._destroy (its C destroy function)."""
    _destroy = None

    @property
    def closed(self):
        return self._c is None

    def _ptr(self):
        self.model._m  # closed with its model
        return open_pointer(self._c, self.model.handle, type(self).__name__)

    def close(self):
        c, self._c = getattr(self, "_c", None), None
        if c is not None and self.model.handle._alive():
            type(self)._destroy(c)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class KVCache(ModelCache):
    """Keys and values of one sequence's tokens for incremental decoding (C:
    dataflow_llama_kv_cache_*): model.kv_cache(max_tokens). forward(tokens) runs the new
    tokens at positions length.. over everything cached before them and appends their K/V;
    more than capacity tokens raises. Valid while its model lives (closed with it)."""

    def __init__(self, model, max_tokens):
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, numbers.Integral) or max_tokens < 1:
            raise BadArgumentError(f"KVCache: max_tokens must be an integer >= 1, got {max_tokens!r:.40}")
        self.model = model
        out = ffi.new("Dataflow_Llama_KV_Cache **")
        check(modelslib.dataflow_llama_kv_cache_create(model._m, int(max_tokens), out))
        self._c = out[0]
        self._tokens = model.handle.empty(int(max_tokens), "int32")
        self._logits = None
        model._caches.add(self)

    _destroy = staticmethod(lambda c: modelslib.dataflow_llama_kv_cache_destroy(c))

    @property
    def length(self):
        return int(modelslib.dataflow_llama_kv_cache_length(self._ptr()))

    @property
    def capacity(self):
        return int(modelslib.dataflow_llama_kv_cache_capacity(self._ptr()))

    def reset(self):
        """Forgets the cached tokens (keeps the memory)."""
        check(modelslib.dataflow_llama_kv_cache_reset(self._ptr()))

    def forward(self, tokens, all_logits=False, stream=0):
        """Logits (numpy float32) of the new tokens: [vocab] for the last one, or [n, vocab]."""
        c = self._ptr()
        tokens = check_tokens(tokens, self.model.config.vocab_size, "KVCache.forward: tokens")
        n, vocab = tokens.size, self.model.config.vocab_size
        if self.length + n > self.capacity:
            raise BadArgumentError(f"KVCache.forward: KV cache overflow: {self.length} cached + {n} new tokens "
                                   f"exceed its capacity of {self.capacity} tokens")
        rows = n if all_logits else 1
        if self._logits is None or self._logits.size < rows * vocab:
            self._logits = self.model.handle.empty((rows, vocab), self.model.dtype)
        out = self._logits.view((rows, vocab))
        self.model._on(stream)
        self.model.handle.inbound_transfer(self._tokens.view((n,)), tokens, stream=stream)  # kept until the sync
        check(modelslib.dataflow_llama_forward_cached(self.model._m, stream, c, ffi.cast("int32_t *", self._tokens.ptr),
                                                      n, out.cdata, int(bool(all_logits))))
        logits = fetch(out, stream)
        return logits if all_logits else logits[0]
