"""Sampling text from a causal LM: temperature and nucleus (top-p) sampling, seeded.

sample_next is the one sampler (Llama.generate uses it too). stream() yields tokens as they are
sampled (what `dataflow generate` prints as they come), over a KV cache where the model has one;
generate() collects them.
"""
import math
import numbers

import numpy as np

from ..errors import BadArgumentError


def sample_next(logits, temperature, top_p, rng):
    """One token id from a [vocab] logits row: argmax when temperature is 0, else a draw from
    softmax(logits / temperature) restricted to the smallest set of top tokens whose mass reaches top_p."""
    if temperature == 0:
        return int(np.argmax(logits))
    z = np.asarray(logits, np.float64) / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    cumulative = np.cumsum(p[order])
    keep = order[:int(np.searchsorted(cumulative, top_p)) + 1]
    return int(rng.choice(keep, p=p[keep] / p[keep].sum()))


def _finite(value):
    """value as a finite float, or None (not a real number, or beyond the float range)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def check_sampling(temperature, top_p, max_new_tokens, seed):
    """(max_new_tokens as an int, numpy Generator of seed) once every sampling argument is checked."""
    t, p = _finite(temperature), _finite(top_p)
    if t is None or t < 0 or p is None or not 0 < p <= 1:
        raise BadArgumentError(f"generate: need a finite temperature >= 0 and 0 < top_p <= 1, got "
                               f"{temperature!r:.40}, {top_p!r:.40}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral) or max_new_tokens < 0:
        raise BadArgumentError(f"generate: max_new_tokens must be an integer >= 0, got {max_new_tokens!r:.40}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0):
        raise BadArgumentError(f"generate: seed must be None or an integer >= 0, got {seed!r:.40}")
    return int(max_new_tokens), np.random.default_rng(seed)


def stream(model, prompt_ids, max_new_tokens=100, temperature=1.0, top_p=1.0, seed=None, stop_id=None,
           vocab_size=None):
    """Yields the new token ids one at a time (stopping after stop_id). A model with kv_cache() (Llama)
    decodes over a KV cache, the same tokens as model.generate() for the same seed; any other model
    recomputes its context (cut to max_position_embeddings) with forward() at every step. vocab_size:
    sample only ids below it (a tokenizer smaller than the model's padded vocabulary)."""
    max_new_tokens, rng = check_sampling(temperature, top_p, max_new_tokens, seed)
    ids = [int(i) for i in prompt_ids]
    if not ids:
        raise BadArgumentError("generate: the prompt must have at least one token")
    if max_new_tokens == 0:
        return
    if hasattr(model, "kv_cache"):
        cache = model.kv_cache(len(ids) + max_new_tokens - 1)  # the last token is sampled, never fed back
        try:
            logits = cache.forward(np.asarray(ids, np.int32))
            for n in range(1, max_new_tokens + 1):
                token = sample_next(logits[:vocab_size], temperature, top_p, rng)
                yield token
                if token == stop_id or n == max_new_tokens:
                    return
                logits = cache.forward(np.asarray([token], np.int32))
        finally:
            cache.close()
    window = model.config.max_position_embeddings
    for _ in range(max_new_tokens):
        logits = model.forward(np.asarray([ids[-window:]], dtype=np.int64))
        token = sample_next(logits[0, -1, :vocab_size], temperature, top_p, rng)
        ids.append(token)
        yield token
        if token == stop_id:
            return


def generate(model, prompt_ids, max_new_tokens=100, temperature=1.0, top_p=1.0, seed=None, stop_id=None):
    """The new token ids (stopping early at stop_id, which is included) after prompt_ids: stream()'s."""
    return np.asarray(list(stream(model, prompt_ids, max_new_tokens, temperature, top_p, seed, stop_id)),
                      dtype=np.int64)
