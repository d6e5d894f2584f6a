"""dataflow_sample_batch (sampling.h) against a numpy reference of the same algorithm fed the
same splitmix64 draws, over random logits, histories and every parameter; logprobs against
torch.log_softmax; bad parameters name the row and the field."""
import numpy as np
import pytest
import torch

import dataflow as df
from dataflow.models.sampling import SamplingParams, sample_batch

MASK = (1 << 64) - 1


def splitmix64(state):
    """(new state, uniform in [0, 1))"""
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    z ^= z >> 31
    return state, (z >> 11) * 2.0 ** -53


def reference(logits, p, history, prompt_len, state):
    """(token, new state): the algorithm of sampling.h in numpy float64."""
    z = logits.astype(np.float64)
    history = np.asarray(history, np.int64)
    if p.repetition_penalty != 1:
        seen = np.unique(history)
        z[seen] = np.where(z[seen] > 0, z[seen] / np.float32(p.repetition_penalty),
                           z[seen] * np.float32(p.repetition_penalty))
    counts = np.bincount(history[prompt_len:], minlength=z.size)
    if p.presence_penalty or p.frequency_penalty:
        hit = counts > 0
        z[hit] -= float(np.float32(p.frequency_penalty)) * counts[hit] + float(np.float32(p.presence_penalty))
    if p.temperature == 0:
        return int(np.argmax(z)), state
    z = z / np.float32(p.temperature)
    order = np.lexsort((np.arange(z.size), -z))  # z descending, then id
    n = p.top_k if 0 < p.top_k < z.size else z.size
    e = np.exp(z[order[:n]] - z[order[0]])
    prob = e / e.sum()
    if p.top_p < 1:
        run, keep = 0.0, 0
        while keep < n and run < np.float32(p.top_p):
            run += prob[keep]
            keep += 1
        n = keep
    if p.min_p > 0:
        keep = 0
        while keep < n and prob[keep] >= np.float32(p.min_p) * prob[0]:
            keep += 1
        n = keep
    state, u = splitmix64(state)
    s, run = u * prob[:n].sum(), 0.0
    for i in range(n):
        run += prob[i]
        if run > s:
            return int(order[i]), state
    return int(order[n - 1]), state


PARAMS = [SamplingParams(temperature=0), SamplingParams(), SamplingParams(temperature=0.7, top_k=5),
          SamplingParams(temperature=1.3, top_p=0.8), SamplingParams(min_p=0.05),
          SamplingParams(temperature=0.9, top_k=20, top_p=0.9, min_p=0.02, repetition_penalty=1.3,
                         presence_penalty=0.5, frequency_penalty=0.25),
          SamplingParams(temperature=0, repetition_penalty=2.0, frequency_penalty=1.0)]


def test_matches_numpy_reference_and_torch_logprobs():
    rng = np.random.default_rng(0)
    rows, vocab, steps = len(PARAMS), 101, 40
    states = np.array([1, 2, 3, 12345, 2 ** 63 + 5, 7, 8], np.uint64)
    ref_states = [int(s) for s in states]
    histories = [list(rng.integers(0, vocab, 6)) for _ in range(rows)]
    prompt_lens = [6] * rows
    for _ in range(steps):
        logits = (rng.standard_normal((rows, vocab)) * 3).astype(np.float32)
        tokens, logprobs = sample_batch(logits, PARAMS, histories, prompt_lens, states)
        for r in range(rows):
            want, ref_states[r] = reference(logits[r], PARAMS[r], histories[r], prompt_lens[r], ref_states[r])
            assert tokens[r] == want, (r, PARAMS[r])
            histories[r].append(int(tokens[r]))
        log_p = torch.log_softmax(torch.from_numpy(logits).double(), -1)
        want_lp = log_p[torch.arange(rows), torch.from_numpy(tokens).long()]
        np.testing.assert_allclose(logprobs, want_lp.numpy(), rtol=1e-6, atol=1e-6)
    assert [int(s) for s in states] == ref_states


def test_same_seed_same_tokens_whatever_the_batch():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((3, 50)).astype(np.float32)
    p = SamplingParams(temperature=1.0, top_p=0.95)
    together = sample_batch(logits, [p] * 3, [[]] * 3, [0] * 3, np.array([9, 10, 11], np.uint64))[0]
    for r, seed in enumerate((9, 10, 11)):
        alone = sample_batch(logits[r:r + 1], [p], [[]], [0], np.array([seed], np.uint64))[0]
        assert alone[0] == together[r]


def test_greedy_leaves_the_state_and_ties_pick_the_lowest_id():
    states = np.array([5], np.uint64)
    logits = np.array([[0.0, 2.0, 2.0, 1.0]], np.float32)
    assert sample_batch(logits, [SamplingParams(temperature=0)], [[]], [0], states)[0][0] == 1
    assert states[0] == 5


@pytest.mark.parametrize("kwargs, msg", [(dict(temperature=-1), "temperature must be >= 0"),
                                         (dict(top_p=0), r"top_p must be in \(0, 1\]"),
                                         (dict(top_k=-2), "top_k must be an integer >= 0"),
                                         (dict(repetition_penalty=0), "repetition_penalty must be > 0"),
                                         (dict(min_p=float("nan")), "min_p must be a finite number")])
def test_bad_params_are_named(kwargs, msg):
    with pytest.raises(df.BadArgumentError, match=msg):
        SamplingParams(**kwargs)


def test_c_checks_name_the_row_and_field():
    logits = np.zeros((2, 4), np.float32)
    states = np.zeros(2, np.uint64)
    with pytest.raises(df.BadArgumentError, match=r"histories\[1\]\[0\] = 4 is outside the vocabulary"):
        sample_batch(logits, [SamplingParams()] * 2, [[], [4]], [0, 0], states)
    bad = logits.copy()
    bad[1, 2] = np.inf
    with pytest.raises(df.BadArgumentError, match=r"logits\[1\]\[2\] is not finite"):
        sample_batch(bad, [SamplingParams()] * 2, [[], []], [0, 0], states)
    object.__setattr__(p := SamplingParams(), "top_p", 2.0)  # past the Python check: C's own
    with pytest.raises(df.BadArgumentError, match=r"params\[0\].top_p must be in \(0, 1\], got 2"):
        sample_batch(logits, [p, SamplingParams()], [[], []], [0, 0], states)
