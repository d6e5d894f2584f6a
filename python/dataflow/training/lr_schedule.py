"""The learning-rate schedule of `dataflow train`: a linear warmup, then a cosine decay to a floor
by the schedule's last step (its horizon), as nanoGPT and llm.c train. A constant lr keeps the
model bouncing at the noise level its step size allows; the decay lets the end of a run settle
into a lower loss, which is where the held-out loss keeps falling.

The schedule is a pure function of (step, peak, horizon), so a run resumed at step s with the
same peak and horizon continues exactly as if it had never stopped."""
import math

WARMUP_FRACTION = 0.05  # of the horizon; at least one step
FLOOR = 0.1             # the lr at the horizon and after it, as a fraction of the peak


def warmup_steps(horizon):
    return max(1, round(WARMUP_FRACTION * horizon))


def lr_at(step, peak, horizon):
    """The lr of optimizer step `step` (1-based) of a schedule that peaks at `peak` after its warmup
    and decays to FLOOR * peak at step `horizon` (and stays there past it)."""
    warmup = warmup_steps(horizon)
    if step <= warmup:
        return peak * step / warmup
    if step >= horizon:
        return peak * FLOOR
    progress = (step - warmup) / (horizon - warmup)
    return peak * (FLOOR + (1 - FLOOR) * 0.5 * (1 + math.cos(math.pi * progress)))
