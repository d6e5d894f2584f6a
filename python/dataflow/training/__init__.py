"""Training: the Trainer over the one engine (the ring executor, libdataflowring), the ring plan's
memory choice, AdamW hyperparameters, learning-rate schedules, and calibrate(handle): a handle's own
speeds for the planner."""
from .calibration import calibrate
from .trainer import Trainer

__all__ = ["Trainer", "calibrate"]
