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


def _scale_array(x, what):
    if x is not None and (_array(x, what).dtype != "fp32" or x.size != 1):
        raise BadArgumentError(f"{what}: expected an fp32 array of 1 element, got {x.dtype}{x.shape}")
    return x


def adamw_step(h, param, grad, m, v, step, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, master=None,
               scale=None, stream=0):
    """One torch.optim.AdamW step in place on param, m, v (and master): param fp32 or bf16,
    grad fp32 or bf16, m and v fp32, master an optional fp32 copy of a bf16 param, scale an
    optional device fp32 [1] multiplying the gradient (clip_by_global_norm's output).
    step counts from 1. Returns param."""
    param, grad = _array(param, "adamw_step param"), _array(grad, "adamw_step grad")
    m, v = _array(m, "adamw_step m"), _array(v, "adamw_step v")
    for name, x, dtype in (("grad", grad, grad.dtype), ("m", m, "fp32"), ("v", v, "fp32"),
                           ("master", master, "fp32")):
        if x is not None and (_array(x, f"adamw_step {name}").size != param.size or x.dtype != dtype):
            raise BadArgumentError(f"adamw_step: {name} must be {dtype} with {param.size} elements like param, "
                                   f"got {x.dtype}{x.shape}")
    _scale_array(scale, "adamw_step scale")
    _same_handle(h, param, grad, m, v, master, scale)
    beta1, beta2 = betas
    check(opslib.dataflow_submit_adamw_step(
        h._ptr(), stream, dtypes.enum(param.dtype), dtypes.enum(grad.dtype), param.size, param.cdata, grad.cdata,
        m.cdata, v.cdata, master.cdata if master is not None else ffi.NULL,
        scale.cdata if scale is not None else ffi.NULL, lr, beta1, beta2, eps, weight_decay, int(step)))
    return param


def grad_norm_sq(h, x, out=None, accumulate=False, out_dtype=None, workspace=None, stream=0):
    """out[0] = (out[0] if accumulate else 0) + sum(x^2), fp64 accumulation, the same bits
    for any thread count. out: fp32 or fp64 [1] (default fp32). workspace: fp64 scratch of
    grad_norm_sq_workspace_bytes(x.size) bytes, allocated when not given. Returns out."""
    x = _array(x, "grad_norm_sq x")
    out_dtype = out_dtype or (out.dtype if out is not None else "fp32")
    if out is None:
        if accumulate:
            raise BadArgumentError("grad_norm_sq: accumulate=True needs out")
        out = h.empty((1,), out_dtype)
    if _array(out, "grad_norm_sq out").dtype != out_dtype or out.size != 1:
        raise BadArgumentError(f"grad_norm_sq: out must be {out_dtype} of 1 element, got {out.dtype}{out.shape}")
    nbytes = opslib.dataflow_grad_norm_sq_workspace_bytes(x.size)
    if workspace is None:
        workspace = h.empty((nbytes // 8,), "fp64")
    if _array(workspace, "grad_norm_sq workspace").nbytes < nbytes:
        raise BadArgumentError(f"grad_norm_sq: workspace must hold {nbytes} bytes, got {workspace.nbytes}")
    _same_handle(h, x, out, workspace)
    check(opslib.dataflow_submit_grad_norm_sq(h._ptr(), stream, dtypes.enum(x.dtype), dtypes.enum(out.dtype), x.size,
                                              x.cdata, workspace.cdata, out.cdata, int(bool(accumulate))))
    return out


def grad_norm_sq_workspace_bytes(n):
    return opslib.dataflow_grad_norm_sq_workspace_bytes(n)


def clip_by_global_norm(h, sumsq, max_norm, scale=None, norm=None, stream=0):
    """scale = min(1, max_norm / (sqrt(sumsq) + 1e-6)) and norm = sqrt(sumsq), as
    torch.nn.utils.clip_grad_norm_, into device fp32 [1] arrays (allocated when not given);
    pass scale to adamw_step. Returns (scale, norm)."""
    sumsq = _array(sumsq, "clip_by_global_norm sumsq")
    if sumsq.size != 1:
        raise BadArgumentError(f"clip_by_global_norm: sumsq must have 1 element, got shape {sumsq.shape}")
    scale = _scale_array(scale, "clip_by_global_norm scale") if scale is not None else h.empty((1,), "fp32")
    norm = _scale_array(norm, "clip_by_global_norm norm") if norm is not None else h.empty((1,), "fp32")
    _same_handle(h, sumsq, scale, norm)
    check(opslib.dataflow_submit_clip_by_global_norm(h._ptr(), stream, dtypes.enum(sumsq.dtype), sumsq.cdata,
                                                     float(max_norm), scale.cdata, norm.cdata))
    return scale, norm
