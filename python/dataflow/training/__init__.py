"""Training: the Trainer over the one engine (the ring executor, libdataflowring), the ring plan's
memory choice, AdamW hyperparameters, learning-rate schedules, loss_backward(model, tokens)
(gradients without a step), and calibrate(handle): a handle's own speeds for the planner."""
from .calibration import calibrate
from .loss_backward import loss_backward
from .trainer import Trainer

__all__ = ["Trainer", "calibrate", "loss_backward"]
