"""dataflow: streams, events, explicit data movement and fingerprinted ops over a C core.

    import dataflow as df
    h = df.Handle("host", streams=4, device_memory="256MiB")
    a = h.from_numpy(x, dtype="bf16")
    c = df.ops.matmul(h, a, a, transpose_b=True)
    c.numpy()

Every module of the package is an attribute too, imported on first use (df.checkpoint,
df.pretrained, df.vulkan, ...), as after `import dataflow.checkpoint`.
"""
import importlib as _importlib
import os as _os

from . import distributed, dtypes, models, ops
from .array import Array
from .custom_ops import CompileError, CustomOp
from .errors import (AlreadyRegisteredError, BadArgumentError, CallbackError, ClosedError, DataflowError,
                     FileFormatError, LoadError, OutOfMemoryError, UnknownOpError, UnsupportedError)
from .handle import Event, Handle
from .models import Trainer
from . import ring

__version__ = "0.1.0"

from .build_info import load_pip_onednn, warn_if_slow  # noqa: E402

load_pip_onednn()
warn_if_slow()

__all__ = ["Array", "AlreadyRegisteredError", "BadArgumentError", "CallbackError", "ClosedError", "CompileError",
           "CustomOp", "DataflowError", "Event", "FileFormatError", "Handle", "LoadError", "OutOfMemoryError", "Trainer",
           "UnknownOpError", "UnsupportedError", "distributed", "dtypes", "models", "ops", "ring"]

_MODULES = sorted(f[:-3] for f in _os.listdir(_os.path.dirname(__file__)) if f.endswith(".py") and not f.startswith("_"))


def __getattr__(name):
    if name in _MODULES:
        return _importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'dataflow' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_MODULES))
