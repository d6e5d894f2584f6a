"""The Trainer's AdamW hyperparameters, checked before a step submits anything: a step that
raises leaves the model, the optimizer state, the step count and the data position as they were."""
import math
import numbers

from .._ffi import ffi
from ..errors import BadArgumentError

# name -> [lowest, highest): what torch.optim.AdamW accepts, finite
BOUNDS = {"lr": (0.0, math.inf), "beta1": (0.0, 1.0), "beta2": (0.0, 1.0), "eps": (0.0, math.inf),
          "weight_decay": (0.0, math.inf), "grad_clip": (0.0, math.inf)}


def _real(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise BadArgumentError(f"Trainer: {name} must be a real number, got {value!r}")
    low, high = BOUNDS[name]
    try:
        as_float = float(value)
    except OverflowError:  # an int past the float range, e.g. 10**400
        as_float = math.inf
    if not low <= as_float < high or not math.isfinite(as_float):
        raise BadArgumentError(f"Trainer: {name} must be a finite number in [{low:g}, {high:g}), got {value!r:.60}")
    return as_float


def betas_pair(betas):
    """(beta1, beta2) from any pair; BadArgumentError for anything else."""
    try:
        pair = tuple(betas)
    except TypeError:
        pair = None
    if pair is None or len(pair) != 2:
        raise BadArgumentError(f"Trainer: betas must be a pair (beta1, beta2), got {betas!r}")
    return pair


def adamw_hyperparameters(trainer):
    """(Dataflow_AdamW_Params, grad_clip) of the trainer's attributes as they are now."""
    beta1, beta2 = betas_pair(trainer.betas)
    values = {"lr": trainer.lr, "beta1": beta1, "beta2": beta2, "eps": trainer.eps,
              "weight_decay": trainer.weight_decay, "grad_clip": 0.0 if trainer.grad_clip is None else trainer.grad_clip}
    checked = {name: _real(name, value) for name, value in values.items()}
    grad_clip = checked.pop("grad_clip")
    seed = getattr(trainer, "optimizer_seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2**64:
        raise BadArgumentError(f"Trainer: optimizer_seed must be an integer in [0, 2^64), got {seed!r:.60}")
    return ffi.new("Dataflow_AdamW_Params *", dict(checked, seed=int(seed))), grad_clip
