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


def _cu_seqlens(h, cu_seqlens, total, stream):
    """cu_seqlens as a device int32 array: a numpy array is validated (starts at 0, never
    decreases, ends at total) and uploaded; a device array is used as is (kernels treat bad
    offsets safely, see ops.h)."""
    if isinstance(cu_seqlens, Array):
        if cu_seqlens.dtype != "int32" or len(cu_seqlens.shape) != 1 or cu_seqlens.size < 2:
            raise BadArgumentError(f"attention: cu_seqlens must be int32 of shape (num_seqs + 1,), got "
                                   f"{cu_seqlens.dtype}{cu_seqlens.shape}")
        return cu_seqlens
    cu = np.asarray(cu_seqlens)
    if cu.ndim != 1 or cu.size < 2 or not np.issubdtype(cu.dtype, np.integer):
        raise BadArgumentError(f"attention: cu_seqlens must be a 1-D integer array of num_seqs + 1 >= 2 offsets, "
                               f"got {cu.dtype}{cu.shape}")
    if cu[0] != 0:
        raise BadArgumentError(f"attention: cu_seqlens[0] must be 0, got {cu[0]}")
    down = np.flatnonzero(np.diff(cu) < 0)
    if down.size:
        i = int(down[0]) + 1
        raise BadArgumentError(f"attention: cu_seqlens must be non-decreasing, but cu_seqlens[{i}] = {cu[i]} < "
                               f"cu_seqlens[{i - 1}] = {cu[i - 1]}")
    if cu[-1] != total:
        raise BadArgumentError(f"attention: cu_seqlens[{cu.size - 1}] must equal total_tokens = {total}, "
                               f"got {cu[-1]}")
    return h.from_numpy(cu.astype(np.int32), stream=stream)


def _attention_shapes(q, k, v):
    if len(q.shape) != 3 or len(k.shape) != 3 or k.shape != v.shape:
        raise BadArgumentError(f"attention: q must be (tokens, q_heads, head_dim) and k, v (tokens, kv_heads, "
                               f"head_dim) alike, got {q.shape}, {k.shape}, {v.shape}")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise BadArgumentError(f"attention: q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    (total, hq, d), (tk, hkv, dk) = q.shape, k.shape
    if tk != total or dk != d:
        raise BadArgumentError(f"attention: k/v {k.shape} must have q's {total} tokens and head_dim {d}")
    if hq % hkv:
        raise BadArgumentError(f"attention: num_q_heads ({hq}) must be a multiple of num_kv_heads ({hkv})")
    return total, hq, hkv, d


def _check_like(x, what, shape, dtype):
    if _array(x, f"attention {what}").shape != tuple(shape) or x.dtype != dtype:
        raise BadArgumentError(f"attention: {what} must be {dtype}{tuple(shape)}, got {x.dtype}{x.shape}")
    return x


def attention(h, q, k, v, cu_seqlens, scale=None, causal=True, out=None, lse=None, stream=0):
    """Softmax attention over packed variable-length sequences (see ops.h):
    q (tokens, q_heads, head_dim), k/v (tokens, kv_heads, head_dim), cu_seqlens the num_seqs + 1
    sequence offsets (numpy or device int32). scale defaults to 1/sqrt(head_dim).
    Returns (out like q, lse fp32 (q_heads, tokens))."""
    q, k, v = _array(q, "attention q"), _array(k, "attention k"), _array(v, "attention v")
    total, hq, hkv, d = _attention_shapes(q, k, v)
    cu = _cu_seqlens(h, cu_seqlens, total, stream)
    out = _check_like(out, "out", q.shape, q.dtype) if out is not None else h.empty(q.shape, q.dtype)
    lse = _check_like(lse, "lse", (hq, total), "fp32") if lse is not None else h.empty((hq, total), "fp32")
    scale = 1.0 / d ** 0.5 if scale is None else float(scale)
    _same_handle(h, q, k, v, cu, out, lse)
    check(opslib.dataflow_submit_attention(h._ptr(), stream, dtypes.enum(q.dtype), q.cdata, k.cdata, v.cdata,
                                           cu.cdata, out.cdata, lse.cdata, total, cu.size - 1, hq, hkv, d, scale,
                                           int(bool(causal))))
    return out, lse


def attention_bwd(h, dout, q, k, v, out, lse, cu_seqlens, scale=None, causal=True, dq=None, dk=None, dv=None,
                  workspace=None, stream=0):
    """Gradients of attention() given dout and its (out, lse); deterministic. Returns (dq, dk, dv).
    workspace: a device array of at least dataflow_attention_bwd_workspace_bytes; by default one
    is allocated, and freeing it on return waits for the handle's queued work."""
    q, k, v = _array(q, "attention q"), _array(k, "attention k"), _array(v, "attention v")
    total, hq, hkv, d = _attention_shapes(q, k, v)
    _check_like(dout, "dout", q.shape, q.dtype)
    _check_like(out, "out", q.shape, q.dtype)
    _check_like(lse, "lse", (hq, total), "fp32")
    cu = _cu_seqlens(h, cu_seqlens, total, stream)
    dq = _check_like(dq, "dq", q.shape, q.dtype) if dq is not None else h.empty(q.shape, q.dtype)
    dk = _check_like(dk, "dk", k.shape, k.dtype) if dk is not None else h.empty(k.shape, k.dtype)
    dv = _check_like(dv, "dv", v.shape, v.dtype) if dv is not None else h.empty(v.shape, v.dtype)
    scale = 1.0 / d ** 0.5 if scale is None else float(scale)
    _same_handle(h, dout, q, k, v, out, lse, cu, dq, dk, dv)
    nbytes = opslib.dataflow_attention_bwd_workspace_bytes(total, cu.size - 1, hq, hkv, d)
    if nbytes < 0:
        raise BadArgumentError(f"attention_bwd: invalid sizes: {total} tokens, {hq}/{hkv} heads, head_dim {d}")
    if workspace is None:
        workspace = h.empty((nbytes,), "uint8")
    _same_handle(h, _array(workspace, "attention_bwd workspace"))
    check(opslib.dataflow_submit_attention_bwd(h._ptr(), stream, dtypes.enum(q.dtype), dout.cdata, q.cdata, k.cdata,
                                               v.cdata, out.cdata, lse.cdata, cu.cdata, dq.cdata, dk.cdata, dv.cdata,
                                               workspace.cdata, workspace.nbytes, total, cu.size - 1, hq, hkv, d, scale,
                                               int(bool(causal))))
    return dq, dk, dv
