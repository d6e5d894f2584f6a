"""Sampling (temperature, top-p, seed) against a stand-in model with fixed logits."""
import types

import numpy as np
import pytest

from dataflow import BadArgumentError
from dataflow.models.generate import generate, sample_next

LOGITS = np.log(np.array([0.5, 0.3, 0.15, 0.05]))


class FixedLogits:
    """forward() gives LOGITS at every position; records the contexts it saw."""

    def __init__(self, window=8):
        self.config = types.SimpleNamespace(max_position_embeddings=window)
        self.contexts = []

    def forward(self, tokens):
        self.contexts.append(tokens.copy())
        return np.broadcast_to(LOGITS, tokens.shape + (4,))


def frequencies(temperature, top_p, n=20000):
    rng = np.random.default_rng(0)
    return np.bincount([sample_next(LOGITS, temperature, top_p, rng) for _ in range(n)], minlength=4) / n


def test_temperature_one_samples_the_softmax():
    np.testing.assert_allclose(frequencies(1.0, 1.0), [0.5, 0.3, 0.15, 0.05], atol=0.015)


def test_top_p_keeps_the_smallest_nucleus():
    np.testing.assert_allclose(frequencies(1.0, 0.79), [0.5 / 0.8, 0.3 / 0.8, 0, 0], atol=0.015)
    np.testing.assert_allclose(frequencies(1.0, 0.81), [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0], atol=0.015)
    assert frequencies(1.0, 0.1, n=200)[0] == 1


def test_temperature_sharpens_and_zero_is_greedy():
    p = np.exp(LOGITS / 0.5) / np.exp(LOGITS / 0.5).sum()
    np.testing.assert_allclose(frequencies(0.5, 1.0), p, atol=0.015)
    assert frequencies(0.0, 1.0, n=50)[0] == 1


def test_generate_is_seeded_windowed_and_stops():
    model = FixedLogits(window=8)
    a = generate(model, [1, 2, 3], max_new_tokens=12, seed=5)
    assert len(a) == 12 and max(len(c[0]) for c in model.contexts) == 8
    np.testing.assert_array_equal(model.contexts[0], [[1, 2, 3]])
    np.testing.assert_array_equal(generate(FixedLogits(), [1, 2, 3], max_new_tokens=12, seed=5), a)
    stopped = generate(FixedLogits(), [0], max_new_tokens=50, temperature=0, stop_id=0)
    np.testing.assert_array_equal(stopped, [0])
    with pytest.raises(BadArgumentError, match="top_p"):
        generate(model, [1], top_p=0)
    with pytest.raises(BadArgumentError, match="at least one token"):
        generate(model, [])


def test_stream_over_the_kv_cache_matches_llama_generate(h):
    models = pytest.importorskip("dataflow.models")
    from dataflow.models.generate import stream
    config = models.LlamaConfig.from_dict({"model_type": "llama", "vocab_size": 53, "hidden_size": 32,
                                           "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
                                           "num_key_value_heads": 2, "max_position_embeddings": 64})
    model = models.Llama(h, config, seed=3)
    prompt = np.array([5, 9, 2, 44], np.int64)
    for temperature, seed in ((0.0, None), (1.0, 7)):
        want = model.generate(prompt, 20, temperature, 0.9, seed)
        got = list(stream(model, prompt, 20, temperature, 0.9, seed))
        np.testing.assert_array_equal(got, want)
    greedy = model.generate(prompt, 30, 0.0)
    before = h.memory_in_use()
    stop = int(greedy[3])
    np.testing.assert_array_equal(list(stream(model, prompt, 30, 0.0, stop_id=stop)),
                                  greedy[:list(greedy).index(stop) + 1])
    assert h.memory_in_use() == before  # the stream closed its KV cache


def test_stream_samples_only_below_vocab_size():
    from dataflow.models.generate import stream
    got = list(stream(FixedLogits(), [0], max_new_tokens=300, temperature=1.0, seed=0, vocab_size=2))
    assert set(got) == {0, 1}  # token 2 and 3 (25% of the mass) never appear
