"""User ops: skeletons, submission from Python, and registration of native (C source or
shared object) and external (Python callable or shared object) ops."""
import hashlib
import math
import numbers
import os
import subprocess
import tempfile

import numpy as np

from . import dtypes
from ._ffi import INCLUDE_DIRS, LIB_DIR, ffi, lib
from .array import Array
from .c_strings import c_bytes, c_string
from .errors import BadArgumentError, DataflowError, check

# The C source of a small user op, y[i] += a * x[i] (data/axpy.c; symbols axpy and axpy_launch, argument
# dtypes AXPY_DTYPES).
with open(os.path.join(os.path.dirname(__file__), "data", "axpy.c"), encoding="utf-8") as _f:
    AXPY_SOURCE = _f.read()
AXPY_DTYPES = ("int64_scalar", "fp32_scalar", "fp32", "fp32")

_SCALAR_CTYPES = {"fp32_scalar": "float", "fp64_scalar": "double", "int32_scalar": "int32_t",
                  "int64_scalar": "int64_t", "uint64_scalar": "uint64_t", "bool_scalar": "int32_t"}
_INT_RANGES = {"int32_scalar": (-2**31, 2**31 - 1), "int64_scalar": (-2**63, 2**63 - 1),
               "uint64_scalar": (0, 2**64 - 1), "bool_scalar": (0, 1)}
_FLOAT_MAX = {"fp32_scalar": float(np.finfo(np.float32).max), "fp64_scalar": float(np.finfo(np.float64).max)}


def _scalar(value, dt, where):
    """A scalar argument checked against its C type: an integer type takes integers in its range
    (bool_scalar: a bool or 0/1), a float type any real number its C type holds (inf and NaN as
    given, never a finite value that would become inf)."""
    if dt in _INT_RANGES:
        low, high = _INT_RANGES[dt]
        if isinstance(value, bool) and dt != "bool_scalar" or not isinstance(value, numbers.Integral):
            raise BadArgumentError(f"{where}: expected an integer for {dt}, got {value!r:.40}")
        if not low <= value <= high:
            raise BadArgumentError(f"{where}: {value} is outside the range of {dt} [{low}, {high}]")
        return int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise BadArgumentError(f"{where}: expected a number for {dt}, got {type(value).__name__}")
    try:
        as_float = float(value)
    except OverflowError:  # an int past every float
        as_float = None
    if as_float is None or math.isfinite(as_float) and abs(as_float) > _FLOAT_MAX[dt]:
        raise BadArgumentError(f"{where}: {value!r:.40} is outside the range of {dt} (at most {_FLOAT_MAX[dt]:g})")
    return as_float


class CompileError(DataflowError):
    pass


def skeleton(name, arg_dtypes):
    """A C Op_Skeleton (cdata) for a nickname and a list of datatype names."""
    name_c = c_string(name, "op name")
    arg_dtypes = list(arg_dtypes)
    values = ffi.new("DataflowDatatype[]", [dtypes.enum(d) for d in arg_dtypes] or [0])
    s = ffi.new("Op_Skeleton *")
    check(lib.dataflow_op_skeleton_init(s, name_c, len(arg_dtypes), values))
    return s


def fingerprint_hex(s):
    out = ffi.new("char[65]")
    lib.dataflow_fingerprint_hex(s.fingerprint, out)
    return ffi.string(out).decode()


class CustomOp:
    """A registered op; call it with one value per argument: an Array (or int device
    pointer, or None) for tensors, a number for scalars."""

    def __init__(self, handle, skel):
        self.handle = handle
        self.skeleton = skel
        self.name = ffi.string(skel.nickname).decode()
        self.arg_dtypes = [dtypes.name_of(skel.arg_dtypes[i]) for i in range(skel.num_args)]
        self.fingerprint = fingerprint_hex(skel)

    def __call__(self, *args, stream=0):
        if len(args) != len(self.arg_dtypes):
            raise BadArgumentError(f"op '{self.name}': expected {len(self.arg_dtypes)} arguments "
                                   f"({', '.join(self.arg_dtypes)}), got {len(args)}")
        op = ffi.new("Op *")
        op.skeleton = self.skeleton[0]
        values = []
        for i, (value, dt) in enumerate(zip(args, self.arg_dtypes)):
            if dt in _SCALAR_CTYPES:
                cell = ffi.new(_SCALAR_CTYPES[dt] + " *", _scalar(value, dt, f"op '{self.name}' argument {i}"))
            else:
                if isinstance(value, Array):
                    if value.dtype != dt:
                        raise BadArgumentError(f"op '{self.name}' argument {i}: expected a {dt} array, "
                                               f"got {value.dtype}")
                    value = value._ptr_for(self.handle, f"op '{self.name}' argument {i} ({dt})")
                cell = ffi.new("void **", ffi.cast("void *", value or 0))
            values.append(cell)
            op.op_args[i] = cell
        self.handle._call("submit_op", op, stream)


def _flags(replace):
    return lib.DATAFLOW_REGISTER_REPLACE if replace else 0


def _cstr_array(names, what):
    keep = [c_string(n, what) if n else ffi.NULL for n in names]
    return ffi.new("const char *[]", keep), keep


def cache_dir():
    return os.environ.get("DATAFLOW_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "dataflow",
                                                                "native")


def compile_c(source, flags=()):
    """Compiles C source into a shared object cached by (source, compiler, flags, headers)."""
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-std=c11", "-O3", "-march=native", "-fPIC", "-shared", "-D_GNU_SOURCE", *flags]
    cmd += [f"-I{d}" for d in INCLUDE_DIRS]
    cmd += [f"-L{LIB_DIR}", f"-Wl,-rpath,{LIB_DIR}"]  # kernels may call libdataflow (errors, conversions)
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise CompileError(f"native op: C compiler {cc!r} not usable: {e}") from None
    key = hashlib.sha256("\0".join([source, version, *cmd]).encode())
    for d in INCLUDE_DIRS:
        for name in sorted(os.listdir(os.path.join(d, "dataflow"))):
            with open(os.path.join(d, "dataflow", name), "rb") as f:
                key.update(f.read())
    out = os.path.join(cache_dir(), key.hexdigest()[:32] + ".so")
    if os.path.exists(out):
        return out
    os.makedirs(cache_dir(), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "op.c")
        with open(src, "w") as f:
            f.write(source)
        built = os.path.join(tmp, "op.so")
        r = subprocess.run(cmd + [src, "-o", built, "-ldataflow"], capture_output=True, text=True)
        if r.returncode != 0:
            raise CompileError(f"native op: compiling C source failed ({' '.join(cmd)}):\n{r.stderr}")
        os.replace(built, out + f".{os.getpid()}")
        os.replace(out + f".{os.getpid()}", out)  # atomic: concurrent builders never see half a file
    return out


def _signature(signature):
    """The signature as a C string (a cdata owning its bytes), or NULL for none."""
    if signature is None:
        return ffi.NULL
    if not isinstance(signature, str):
        raise BadArgumentError(f"signature must be a string or None, got {type(signature).__name__}")
    return c_string(signature, "signature")


def register_native(handle, name, arg_dtypes, source, library, symbol, launch, init, replace, flags, signature):
    if (source is None) == (library is None):
        raise BadArgumentError("register_native_op: give exactly one of source= (C code) or library= (a .so path)")
    if not symbol:
        raise BadArgumentError("register_native_op: symbol= (the kernel function's name) is required")
    path = compile_c(source, flags) if source is not None else os.fspath(library)
    skel = skeleton(name, arg_dtypes)
    kernels, k1 = _cstr_array([symbol], "symbol")
    launches, k2 = _cstr_array([launch], "launch")
    inits, k3 = _cstr_array([init], "init")
    sig = _signature(signature)
    handle._call("register_native_code", c_bytes(path, "library"), ffi.NULL, 1, skel, kernels, launches, inits,
                 ffi.new("const char *[]", [sig]), _flags(replace))
    return CustomOp(handle, skel)


class _PythonOp:
    """A Python external op: the object its C record's state points to."""

    def __init__(self, handle, name, fn, arg_dtypes):
        self.work = handle._work
        self.registry = handle._python_ops
        self.what = f"external op '{name}'"
        self.fn = fn
        self.kinds = [(i, _SCALAR_CTYPES.get(dt)) for i, dt in enumerate(arg_dtypes)]

    def call(self, op):
        args = []
        for i, ctype in self.kinds:
            if ctype:
                args.append(ffi.cast(ctype + " *", op.op_args[i])[0])
            else:
                args.append(int(ffi.cast("uintptr_t", ffi.cast("void **", op.op_args[i])[0])))
        self.fn(*args)


@ffi.callback("Dataflow_Status(Dataflow_Handle *, int, const Op *, void *)")
def _run_python_op(h, stream_id, op, state):
    """Runs on the stream's worker; an exception is kept for the next sync of the stream (by
    Python: the C status stays OK, so the failure is reported once)."""
    py = ffi.from_handle(state)
    py.work.run(stream_id, py.what, py.call, op)
    return lib.DATAFLOW_OK


@ffi.callback("void(void *)")
def _release_python_op(state):
    """The op state's destroy: C calls it once no queued work can call the op (it was replaced,
    or its handle closed)."""
    ffi.from_handle(state).registry.pop(int(ffi.cast("uintptr_t", state)), None)


def register_external(handle, name, arg_dtypes, fn, library, symbol, init, replace, signature):
    arg_dtypes = list(arg_dtypes)
    skel = skeleton(name, arg_dtypes)
    sig = _signature(signature)
    if fn is not None:
        if library is not None or not callable(fn):
            raise BadArgumentError("register_external_op: give a callable fn= or library= + symbol=, not both")
        data = ffi.new_handle(_PythonOp(handle, name, fn, arg_dtypes))
        key = int(ffi.cast("uintptr_t", data))
        handle._python_ops[key] = data
        state = ffi.new("Dataflow_Op_State *", {"data": data, "destroy": _release_python_op})
        try:
            handle._call("register_external_func", skel, _run_python_op, state, sig, _flags(replace))
        except BaseException:
            handle._python_ops.pop(key, None)  # C never took it, or destroyed it already
            raise
    else:
        if library is None or not symbol:
            raise BadArgumentError("register_external_op: give fn= (a callable) or library= and symbol=")
        funcs, k1 = _cstr_array([symbol], "symbol")
        inits, k2 = _cstr_array([init], "init")
        handle._call("register_external_code", c_bytes(library, "library"), 1, skel, funcs, inits,
                     ffi.new("const char *[]", [sig]), _flags(replace))
    return CustomOp(handle, skel)
