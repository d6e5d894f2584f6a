"""Every op group of dataflow, forward and backward, vs its PyTorch peer on the same device in the
same run (host: torch on the CPU; --backend cuda: torch on that GPU).

    python bench/ops.py [--backend host|cuda|cuda:N] [--ops attention,cross_entropy] [--threads 2]
                        [--dtypes fp32,bf16] [--quick]

Each group lives in bench/ops_<group>.py (its docstring gives shapes and peers) and runs alone
too; the harness (bench/harness.py: timing, memcpy roof, rows, output) documents the interface.
A group whose module is absent is skipped with a note. Prints one JSON object, then a summary line.
"""
import importlib

import harness

GROUPS = ("attention", "cross_entropy", "optimizer", "rope_embedding", "elementwise", "norm_swiglu", "dispatch")


def load(group):
    """The group's cases function, or None if bench/ops_<group>.py is absent."""
    try:
        return importlib.import_module(f"ops_{group}").cases
    except ModuleNotFoundError as e:
        if e.name != f"ops_{group}":  # the module exists but something it imports does not
            raise
        return None


if __name__ == "__main__":
    harness.require_peers("torch")  # before the groups import it
    harness.main({group: load(group) for group in GROUPS})
