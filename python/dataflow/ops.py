"""The default ops on device arrays. Shapes are checked here; dtypes, pointers and buffer
extents are checked again in C (libdataflowops), which has the last word."""
import numpy as np

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


def cross_entropy(h, logits, labels, ignore_index=-100, scale=None, dlogits=None, stream=0):
    """Softmax cross-entropy forward and backward in one pass per row of logits [tokens, vocab]:
    loss[t] = logsumexp(logits[t]) - logits[t, labels[t]] (fp32) and
    dlogits = scale * (softmax(logits) - onehot(labels)) in logits' dtype. Rows labelled
    ignore_index get loss 0 and zero gradient. scale defaults to 1 / (number of valid tokens),
    the gradient of the mean loss. dlogits: an array to fill, None (a new one) or "inplace"
    (overwrite logits). labels: numpy integers (validated, uploaded) or a device int32 array
    (labels outside [0, vocab) other than ignore_index then give loss 0, zero gradient; with
    scale=None they are read back to count the valid tokens). Returns (loss, dlogits)."""
    logits = _array(logits, "cross_entropy logits")
    if len(logits.shape) != 2:
        raise BadArgumentError(f"cross_entropy: logits must be 2-D [tokens, vocab], got shape {logits.shape}")
    tokens, vocab = logits.shape
    if not isinstance(ignore_index, (int, np.integer)) or not -2**31 <= ignore_index < 2**31:
        raise BadArgumentError(f"cross_entropy: ignore_index must be an int32, got {ignore_index!r}")
    if isinstance(labels, Array):
        if _array(labels, "cross_entropy labels").dtype != "int32" or labels.shape != (tokens,):
            raise BadArgumentError(f"cross_entropy: labels must be int32 of shape {(tokens,)}, "
                                   f"got {labels.dtype}{labels.shape}")
        host_labels = labels.numpy() if scale is None else None
    else:
        host_labels = np.asarray(labels)
        if host_labels.dtype.kind not in "iu" or host_labels.shape != (tokens,):
            raise BadArgumentError(f"cross_entropy: labels must be integers of shape {(tokens,)}, "
                                   f"got {host_labels.dtype}{host_labels.shape}")
        bad = (host_labels != ignore_index) & ((host_labels < 0) | (host_labels >= vocab))
        if bad.any():
            t = int(np.flatnonzero(bad)[0])
            raise BadArgumentError(f"cross_entropy: labels must be in [0, {vocab}) or ignore_index={ignore_index}, "
                                   f"got {host_labels[t]} at token {t} ({int(bad.sum())} out of range)")
        labels = h.from_numpy(host_labels.astype(np.int32), stream=stream)
    if scale is None:
        valid = int(np.count_nonzero((host_labels != ignore_index) & (host_labels >= 0) & (host_labels < vocab)))
        scale = 1.0 / valid if valid else 0.0
    if isinstance(dlogits, str):
        if dlogits != "inplace":
            raise BadArgumentError(f"cross_entropy: dlogits must be an Array, None or 'inplace', got {dlogits!r}")
        dlogits = logits
    elif dlogits is None:
        dlogits = h.empty(logits.shape, logits.dtype)
    elif _array(dlogits, "cross_entropy dlogits").shape != logits.shape or dlogits.dtype != logits.dtype:
        raise BadArgumentError(f"cross_entropy: dlogits must be {logits.dtype}{logits.shape}, "
                               f"got {dlogits.dtype}{dlogits.shape}")
    loss = h.empty((tokens,), "fp32")
    _same_handle(h, logits, labels, dlogits)
    check(opslib.dataflow_submit_cross_entropy(h._ptr(), stream, dtypes.enum(logits.dtype), tokens, vocab,
                                               int(ignore_index), float(scale), logits.cdata,
                                               ffi.cast("int32_t *", labels.ptr), ffi.cast("float *", loss.ptr),
                                               dlogits.cdata))
    return loss, dlogits
