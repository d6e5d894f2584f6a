"""The `dataflow` command (`main`) and what only the command uses: the training run (train), the
corpus, progress lines, loss and plan plots, the MPI launcher, quantize and import-gguf."""
from .main import main

__all__ = ["main"]
