"""A step that raises is invisible: the model, the optimizer state, the step count and what the
next steps compute are bit for bit those of a run in which it never happened (all-resident and in
the ring); malformed hyperparameters are refused naming the one at fault."""
import math

import numpy as np
import pytest

import dataflow as df

CFG = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
       "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32}
RNG = np.random.default_rng(0)
BATCHES = [RNG.integers(0, CFG["vocab_size"], (2, 8)) for _ in range(3)]


def trainer(ring):
    if ring:
        h = df.Handle("host", device_memory="200KiB")
        model = df.models.Llama(h, CFG, seed=3, placement="host")
        t = df.Trainer(model, lr=1e-2, host_memory="64MiB", seq_len=8, batch_size=2, profile="h100-sxm")
        assert t.plan is not None
        return t
    return df.Trainer(df.models.Llama(df.Handle("host", device_memory="64MiB"), CFG, seed=3), lr=1e-2)


FAILURES = {
    "lr nan": ("lr", math.nan),
    "lr inf": ("lr", math.inf),
    "lr string": ("lr", "x"),
    "negative lr": ("lr", -1e-3),
    "beta1 = 1": ("betas", (1.0, 0.95)),
    "betas of length 1": ("betas", (0.9,)),
    "eps nan": ("eps", math.nan),
    "weight_decay None": ("weight_decay", None),
    "grad_clip -1": ("grad_clip", -1.0),
}


@pytest.mark.parametrize("ring", [False, True], ids=["resident", "ring"])
@pytest.mark.parametrize("failure", list(FAILURES))
def test_a_failed_step_is_invisible_to_the_next_steps(ring, failure):
    attr, bad = FAILURES[failure]
    clean, failed = trainer(ring), trainer(ring)
    want = [clean.step(b) for b in BATCHES]
    got = [failed.step(BATCHES[0])]
    good = getattr(failed, attr)
    setattr(failed, attr, bad)
    with pytest.raises(df.BadArgumentError, match=attr if attr != "betas" else "beta"):
        failed.step(BATCHES[1])
    assert failed.step_count == 1
    setattr(failed, attr, good)
    got += [failed.step(b) for b in BATCHES[1:]]
    assert got == want
    assert failed.step_count == clean.step_count == 3
    a, b = failed.state_dict(), clean.state_dict()
    for kind in ("exp_avg", "exp_avg_sq"):
        for name in a[kind]:
            np.testing.assert_array_equal(a[kind][name], b[kind][name], err_msg=f"{kind} {name}")
    wa, wb = failed.model.state_dict(), clean.model.state_dict()
    for name in wa:
        np.testing.assert_array_equal(wa[name], wb[name], err_msg=name)


def test_a_failed_apply_keeps_the_accumulated_gradients():
    clean, failed = trainer(False), trainer(False)
    clean.accumulate(BATCHES[0])
    want = clean.apply()
    failed.accumulate(BATCHES[0])
    failed.lr = math.nan
    with pytest.raises(df.BadArgumentError, match="lr"):
        failed.apply()
    failed.lr = 1e-2
    assert failed.apply() == want and failed.step_count == 1
    assert failed.step(BATCHES[1]) == clean.step(BATCHES[1])


@pytest.mark.parametrize("kwargs, message", [
    ({"lr": "x"}, "lr must be a real number"),
    ({"lr": math.nan}, "lr must be a finite number"),
    ({"betas": (0.9,)}, "betas must be a pair"),
    ({"betas": 0.9}, "betas must be a pair"),
    ({"eps": -1.0}, "eps must be a finite number"),
    ({"plan": "x"}, "plan must be a dataflow.ring.Plan"),
])
def test_malformed_hyperparameters_are_refused_at_construction(kwargs, message):
    model = df.models.Llama(df.Handle("host", device_memory="64MiB"), CFG)
    with pytest.raises(df.BadArgumentError, match=message):
        df.Trainer(model, **kwargs)
