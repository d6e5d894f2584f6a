"""dataflow: streams, events, explicit data movement and fingerprinted ops over a C core.

    import dataflow as df
    h = df.Handle("host", streams=4, device_memory="256MiB")
    a = h.from_numpy(x, dtype="bf16")
    c = df.ops.matmul(h, a, a, transpose_b=True)
    c.numpy()
"""
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
