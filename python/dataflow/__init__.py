"""dataflow: streams, events, explicit data movement and fingerprinted ops over a C core.

    import dataflow as df
    h = df.Handle("host", streams=4, device_memory="256MiB")
    a = h.from_numpy(x, dtype="bf16")
    c = df.ops.matmul(h, a, a, transpose_b=True)
    c.numpy()

Every module of the package is an attribute too, imported on first use (df.io.checkpoint,
df.io.pretrained, df.vulkan, ...), as after `import dataflow.io.checkpoint`.
"""
import importlib as _importlib
import os as _os

from . import distributed, dtypes, models, ops
from .array import Array
from .custom_ops import CompileError, CustomOp
from .errors import (AlreadyRegisteredError, BadArgumentError, CallbackError, ClosedError, DataflowError,
                     FileFormatError, LoadError, OutOfMemoryError, UnknownOpError, UnsupportedError)
from .handle import Event, Handle
from .training import Trainer
from . import ring

__version__ = "0.1.0"

from .build_info import load_pip_onednn, warn_if_slow  # noqa: E402

load_pip_onednn()
warn_if_slow()

__all__ = ["Array", "AlreadyRegisteredError", "BadArgumentError", "CallbackError", "ClosedError", "CompileError",
           "CustomOp", "DataflowError", "Event", "FileFormatError", "Handle", "LoadError", "OutOfMemoryError", "Trainer",
           "UnknownOpError", "UnsupportedError", "distributed", "dtypes", "models", "ops", "ring"]

_HERE = _os.path.dirname(__file__)
_MODULES = sorted(f[:-3] if f.endswith(".py") else f for f in _os.listdir(_HERE) if not f.startswith("_") and (
    f.endswith(".py") or _os.path.isfile(_os.path.join(_HERE, f, "__init__.py"))))


def __getattr__(name):
    if name in _MODULES:
        return _importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'dataflow' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_MODULES))
