"""The default ops on device arrays. Shapes are checked here; dtypes, pointers and buffer
extents are checked again in C (libdataflowops), which has the last word."""
from . import dtypes
from ._ffi import ffi, opslib
from .array import Array
from .errors import BadArgumentError, check


def _array(x, what):
    if not isinstance(x, Array):
        raise BadArgumentError(f"{what}: expected a dataflow Array, got {type(x).__name__}")
    if not x.ptr:
        raise BadArgumentError(f"{what}: array has been freed")
    return x


def _same_handle(h, *arrays):
    for a in arrays:
        if a is not None and a.handle is not h:
            raise BadArgumentError("arrays must belong to the handle the op runs on")


def matmul(h, a, b, out=None, c=None, transpose_a=False, transpose_b=False, alpha=1.0, beta=0.0,
           out_dtype=None, stream=0):
    """out = alpha * op(a) @ op(b) + beta * c, 2-D row-major; fp32 accumulation. out and c
    have out_dtype (fp32 or a's dtype; default: out's dtype, else a's). Returns out."""
    a, b = _array(a, "matmul a"), _array(b, "matmul b")
    if a.dtype != b.dtype:
        raise BadArgumentError(f"matmul: a and b must share a dtype, got {a.dtype} and {b.dtype}")
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise BadArgumentError(f"matmul: a and b must be 2-D, got shapes {a.shape} and {b.shape}")
    m, k = a.shape[::-1] if transpose_a else a.shape
    kb, n = b.shape[::-1] if transpose_b else b.shape
    if k != kb:
        raise BadArgumentError(f"matmul: inner dimensions differ: op(a) is {m}x{k}, op(b) is {kb}x{n}")
    out_dtype = out_dtype or (out.dtype if out is not None else a.dtype)
    if out is None:
        out = h.empty((m, n), out_dtype)
    for name, x in (("out", out), ("c", c)):
        if x is not None and (_array(x, f"matmul {name}").shape != (m, n) or x.dtype != out_dtype):
            raise BadArgumentError(f"matmul: {name} must be {out_dtype} of shape {(m, n)}, got {x.dtype} {x.shape}")
    if beta != 0 and c is None:
        raise BadArgumentError("matmul: beta != 0 needs c")
    _same_handle(h, a, b, out, c)
    check(opslib.dataflow_submit_matmul(h._ptr(), stream, dtypes.enum(a.dtype), dtypes.enum(out_dtype), a.cdata,
                                        b.cdata, c.cdata if c is not None else ffi.NULL, out.cdata, m, n, k,
                                        int(bool(transpose_a)), int(bool(transpose_b)), alpha, beta))
    return out


def add(h, a, b, out=None, alpha=1.0, beta=1.0, stream=0):
    """out = alpha * a + beta * b elementwise (same shape and dtype); out may be a or b."""
    a, b = _array(a, "add a"), _array(b, "add b")
    if a.shape != b.shape or a.dtype != b.dtype:
        raise BadArgumentError(f"add: a and b must match, got {a.dtype}{a.shape} and {b.dtype}{b.shape}")
    out = out if out is not None else h.empty(a.shape, a.dtype)
    if _array(out, "add out").shape != a.shape or out.dtype != a.dtype:
        raise BadArgumentError(f"add: out must be {a.dtype}{a.shape}, got {out.dtype}{out.shape}")
    _same_handle(h, a, b, out)
    check(opslib.dataflow_submit_add(h._ptr(), stream, dtypes.enum(a.dtype), a.size, alpha, a.cdata, beta,
                                     b.cdata, out.cdata))
    return out


def cast(h, x, dtype, out=None, stream=0):
    """out = x converted to dtype (round to nearest even)."""
    x = _array(x, "cast x")
    out = out if out is not None else h.empty(x.shape, dtype)
    if _array(out, "cast out").dtype != dtype or out.size != x.size:
        raise BadArgumentError(f"cast: out must be {dtype} with {x.size} elements, got {out.dtype}{out.shape}")
    _same_handle(h, x, out)
    check(opslib.dataflow_submit_cast(h._ptr(), stream, dtypes.enum(x.dtype), dtypes.enum(dtype), x.size, x.cdata,
                                      out.cdata))
    return out


def set_mem(h, x, value, stream=0):
    """x[:] = value (rounded to x's dtype)."""
    x = _array(x, "set_mem x")
    _same_handle(h, x)
    check(opslib.dataflow_submit_set_mem(h._ptr(), stream, dtypes.enum(x.dtype), x.size, float(value), x.cdata))
    return x
