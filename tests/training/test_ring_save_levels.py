"""Save levels per layer: the planner may let its top layers save everything (no recompute) while
the layers below save less, when memory allows some but not all of them to; the executor runs
such a plan as any other (each layer at its own level), equal to all-resident training."""
import numpy as np
import pytest

import dataflow as df
from tolerances import TOLERANCES
from ring_models import CFG, plan_for, smallest_cap, train_both

ALL = 2


@pytest.mark.slow
def test_llama3_8b_at_48gib_saves_everything_in_its_top_layers():
    """At 48 GiB neither level fits every layer's activations of the fastest shape; the top
    layers save all, the ones below save attention (a level never rises going down)."""
    p = df.ring.plan("llama3-8b", 8192, "48GiB", "64GiB", tokens_per_step=524288, optimizer_state="8bit")
    levels = p.save_levels
    assert ALL in levels and min(levels) < ALL, levels
    assert levels == sorted(levels)
    # recompute only where a layer does not save everything: the backward beats every layer recomputing
    uniform = df.ring.plan("llama3-8b", 8192, "24GiB", "64GiB", tokens_per_step=524288, optimizer_state="8bit")
    assert set(uniform.save_levels) == {1}
    assert p.tokens_per_second > uniform.tokens_per_second


@pytest.mark.slow
def test_mixed_save_levels_train_as_resident():
    """A bf16 model whose plan (at 3x its smallest cap) keeps only its top layer's activations
    whole: the same losses and weights as all-resident training within the bf16 tolerance."""
    cap = 3 * smallest_cap(CFG, "bf16")
    plan = plan_for(CFG, cap, "bf16")
    assert len(set(plan.save_levels)) > 1 and plan.save_levels[-1] == ALL, plan.save_levels
    ring_l, ref_l, ring_w, ref_w, h, ex, _ = train_both(CFG, cap, "bf16", steps=4)
    np.testing.assert_allclose(ring_l, ref_l, **TOLERANCES["bf16"])
    for a, b in zip(ring_w, ref_w):
        np.testing.assert_allclose(a, b, **TOLERANCES["bf16"])
    assert h.memory_peak() <= cap
    assert ex.host_bytes() <= plan.host_capacity
