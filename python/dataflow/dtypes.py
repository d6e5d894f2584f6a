"""Datatype names, their numpy storage, and conversions through libdataflow (RNE)."""
import numpy as np

from ._ffi import ffi, lib
from .errors import BadArgumentError, check

# Tensor datatypes and the numpy dtype that stores their bits on the host.
STORAGE = {
    "fp32": np.float32, "fp16": np.float16, "bf16": np.uint16, "fp8e4m3": np.uint8, "fp8e5m2": np.uint8,
    "fp64": np.float64, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "bool": np.bool_,
}
# Floating types that dataflow_convert handles; numpy has no bf16/fp8, so those decode to fp32.
CONVERTIBLE = ("fp32", "fp16", "bf16", "fp8e4m3", "fp8e5m2")
_FROM_NUMPY = {np.dtype(v): k for k, v in STORAGE.items() if k not in ("bf16", "fp8e4m3", "fp8e5m2")}


_ENUMS = {}  # name -> value, filled as names are asked for (ops ask on every call)


def enum(name):
    """The C DataflowDatatype value for a name such as "bf16" or "int64_scalar"."""
    value = _ENUMS.get(name) if isinstance(name, str) else None
    if value is None:
        value = lib.dataflow_datatype_from_name(name.encode()) if isinstance(name, str) and "\0" not in name else 0
        if value == 0:
            raise BadArgumentError(f"dtype: unknown datatype {name!r}; expected one of {sorted(STORAGE)} "
                                   "or a *_scalar name")
        _ENUMS[name] = value
    return value


def name_of(value):
    return ffi.string(lib.dataflow_datatype_name(value)).decode()


def itemsize(name):
    return lib.dataflow_datatype_size(enum(name))


def from_numpy(dtype):
    """dataflow name for a numpy dtype (float32 -> "fp32", ...)."""
    try:
        return _FROM_NUMPY[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise BadArgumentError(f"dtype: numpy dtype {dtype!r} has no dataflow datatype; expected one of "
                               f"{sorted(str(d) for d in _FROM_NUMPY)}") from None


def _convert(dst_name, dst, src_name, src):
    check(lib.dataflow_convert(enum(dst_name), ffi.from_buffer(dst), enum(src_name), ffi.from_buffer(src),
                               src.size))


def encode(x, name):
    """Values (any numeric array) -> storage array of datatype `name`, rounding to nearest even."""
    if name not in STORAGE:
        enum(name)  # raises with the list of names
    x = np.asarray(x)
    if name not in CONVERTIBLE:
        return np.ascontiguousarray(x, dtype=STORAGE[name])
    src = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(src.shape, dtype=STORAGE[name])
    _convert(name, out, "fp32", src)
    return out


def decode(bits, name):
    """Storage array of datatype `name` -> numpy values (float32 for bf16 and fp8)."""
    bits = np.ascontiguousarray(bits, dtype=STORAGE[name] if name in STORAGE else None)
    if name in ("bf16", "fp8e4m3", "fp8e5m2"):
        out = np.empty(bits.shape, dtype=np.float32)
        _convert("fp32", out, name, bits)
        return out
    enum(name)
    return bits
