"""Training: the Trainer over the one engine (the ring executor, libdataflowring), the ring plan's
memory choice, AdamW hyperparameters, learning-rate schedules and calibration of a handle's speeds."""
from .trainer import Trainer

__all__ = ["Trainer"]
