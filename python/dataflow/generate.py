"""Sampling text from a causal LM: temperature and nucleus (top-p) sampling, seeded.

sample_next is the one sampler (Llama.generate, which decodes with a KV cache, uses it too).
generate() below is the cache-free reference for any model with forward(): each new token
recomputes the whole context (cut to the model's max_position_embeddings).
"""
import numpy as np

from .errors import BadArgumentError


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


def check_sampling(temperature, top_p):
    if not temperature >= 0 or not 0 < top_p <= 1:
        raise BadArgumentError(f"generate: need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")


def generate(model, prompt_ids, max_new_tokens=100, temperature=1.0, top_p=1.0, seed=None, stop_id=None):
    """The new token ids (stopping early at stop_id, which is included) after prompt_ids."""
    check_sampling(temperature, top_p)
    ids = [int(i) for i in prompt_ids]
    if not ids:
        raise BadArgumentError("generate: the prompt must have at least one token")
    window = model.config.max_position_embeddings
    rng = np.random.default_rng(seed)
    new = []
    for _ in range(max_new_tokens):
        logits = model.forward(np.asarray([ids[-window:]], dtype=np.int64))
        token = sample_next(logits[0, -1], temperature, top_p, rng)
        ids.append(token)
        new.append(token)
        if token == stop_id:
            break
    return np.asarray(new, dtype=np.int64)
