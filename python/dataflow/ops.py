"""The default ops on device arrays. Each public function names its arguments and defaults;
the checks, the output allocation and the submit of a catalogue op are its generated wrapper's
(op_wrapper.WRAPPERS: shapes and dtypes from the catalogue), and dtypes, pointers and extents
are checked again in C against the op's signature, which has the last word. Written here by
hand: what the catalogue cannot say (numpy index inputs checked against the sizes, matmul's
transposes, defaults such as attention's scale) and the composite ops (grad_norm_sq,
rms_norm_bwd_w, attention_bwd, attention_kv_bwd, paged_attention, moe_permute), which call
their C functions after check_array."""
import numpy as np

from . import dtypes
from ._ffi import ffi, opslib
from .array import Array
from .errors import BadArgumentError, check
from .op_wrapper import WRAPPERS as _op
from .op_wrapper import check_array


_MATMUL = _op["matmul"].renamed(A="a", B="b", C="c", D="out", trans_a="transpose_a", trans_b="transpose_b")


def matmul(h, a, b, out=None, c=None, transpose_a=False, transpose_b=False, alpha=1.0, beta=0.0,
           out_dtype=None, stream=0):
    """out = alpha * op(a) @ op(b) + beta * c, 2-D row-major; fp32 accumulation. out and c
    have out_dtype (fp32 or a's dtype; default: out's dtype, else a's). Returns out."""
    a, b = check_array(h, a, "matmul: a"), check_array(h, b, "matmul: b")
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise BadArgumentError(f"matmul: a and b must be 2-D, got shapes {a.shape} and {b.shape}")
    m, k = a.shape[::-1] if transpose_a else a.shape
    kb, n = b.shape[::-1] if transpose_b else b.shape
    if k != kb:
        raise BadArgumentError(f"matmul: inner dimensions differ: op(a) is {m}x{k}, op(b) is {kb}x{n}")
    if beta != 0 and c is None:
        raise BadArgumentError("matmul: beta != 0 needs c")
    out_dtype = out_dtype or (check_array(h, out, "matmul: out").dtype if out is not None else a.dtype)
    return _MATMUL(h, stream, in_dtype=a.dtype, out_dtype=out_dtype, A=a, B=b, C=c, D=out, M=m, N=n, K=k,
                         trans_a=transpose_a, trans_b=transpose_b, alpha=alpha, beta=beta)


def add(h, a, b, out=None, alpha=1.0, beta=1.0, stream=0):
    """out = alpha * a + beta * b elementwise (same shape and dtype); out may be a or b."""
    return _op["add"](h, stream, a=a, b=b, out=out, alpha=alpha, beta=beta)


def scale(h, x, alpha, out=None, stream=0):
    """out = alpha * x elementwise: one fp32 product rounded once to x's dtype (fp32, fp16,
    bf16), as torch.mul(x, alpha) with a Python float. out may be x. Returns out."""
    return _op["scale"](h, stream, x=x, out=out, alpha=alpha)


def cast(h, x, dtype, out=None, stream=0):
    """out = x converted to dtype (round to nearest even)."""
    return _op["cast"](h, stream, dst_dtype=dtype, src=x, dst=out)


def set_mem(h, x, value, stream=0):
    """x[:] = value (rounded to x's dtype)."""
    return _op["set_mem"](h, stream, x=x, value=value)


def _index_array(h, x, what, allowed, limit=None):
    """A device array of integer indices. numpy input is checked (every value in [0, limit)
    when limit is given, since kernels treat out-of-range ids as absent) and uploaded; device
    input is used as is: its values are never read on the host."""
    if isinstance(x, Array):
        if x.dtype not in allowed:
            raise BadArgumentError(f"{what}: dtype must be one of {allowed}, got {x.dtype}")
        return x
    x = np.asarray(x)
    name = dtypes.from_numpy(x.dtype) if x.dtype.kind in "iu" else None
    if name not in allowed:
        raise BadArgumentError(f"{what}: dtype must be one of {allowed}, got numpy {x.dtype}")
    if x.ndim != 1 or x.size == 0:
        raise BadArgumentError(f"{what}: must be 1-D and non-empty, got shape {x.shape}")
    if limit is not None:
        bad = np.flatnonzero((x < 0) | (x >= limit))
        if bad.size:
            raise BadArgumentError(f"{what}: value at position {bad[0]} is {x[bad[0]]}, expected in [0, {limit}) "
                                   f"({bad.size} out of range)")
    return h.from_numpy(x)


def embedding(h, ids, table, out=None, stream=0):
    """out[t, :] = table[ids[t], :]. ids: int32/int64, numpy (checked against the vocabulary)
    or device array (an out-of-range id gives a zero row). table [vocab, hidden] fp32/fp16/bf16.
    Returns out [len(ids), hidden]."""
    if len(check_array(h, table, "embedding: table").shape) != 2:
        raise BadArgumentError(f"embedding: table must be [vocab, hidden], got shape {table.shape}")
    ids = _index_array(h, ids, "embedding ids", ("int32", "int64"), table.shape[0])
    return _op["embedding"](h, stream, ids=ids, table=table, out=out)


def embedding_bwd_w(h, ids, d_out, d_table=None, vocab=None, stream=0):
    """d_table[ids[t], :] += d_out[t, :] (fp32, deterministic, token order). d_table is an fp32
    [vocab, hidden] array to accumulate into, or None for a fresh zeroed one of vocab rows.
    Returns d_table."""
    if d_table is None:
        if vocab is None:
            raise BadArgumentError("embedding_bwd_w: give d_table or vocab")
        d_table = h.zeros((vocab, check_array(h, d_out, "embedding_bwd_w: d_out").shape[-1]), "fp32", stream=stream)
    ids = _index_array(h, ids, "embedding_bwd_w ids", ("int32", "int64"),
                       check_array(h, d_table, "embedding_bwd_w: d_table").shape[0])
    return _op["embedding_bwd_w"](h, stream, ids=ids, d_out=d_out, d_table=d_table)
ROPE_TYPES = {"default": opslib.DATAFLOW_ROPE_DEFAULT, "linear": opslib.DATAFLOW_ROPE_LINEAR,
              "llama3": opslib.DATAFLOW_ROPE_LLAMA3, "yarn": opslib.DATAFLOW_ROPE_YARN}
_ROPE_FIELDS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings", "beta_fast",
                "beta_slow", "attention_factor", "mscale", "mscale_all_dim")


def rope_scaling(theta=10000.0, scaling=None, out=None):
    """A Dataflow_Rope_Scaling (cffi; filled into `out` when given) from theta and an HF
    rope_scaling dict: rope_type (or type) default, linear, llama3 or yarn and the parameters HF
    names; a parameter left out or null is 0, which C reads as HF's default where HF has one."""
    s = scaling or {}
    kind = s.get("rope_type", s.get("type", "default"))
    if not isinstance(kind, str) or kind not in ROPE_TYPES:
        why = " (its frequencies change with the sequence length)" if kind == "dynamic" else ""
        raise BadArgumentError(f"rope scaling {kind!r:.40} is not supported{why}; supported: {', '.join(ROPE_TYPES)}")
    c = ffi.new("Dataflow_Rope_Scaling *") if out is None else out
    try:
        c.type, c.theta = ROPE_TYPES[kind], theta
        for field in _ROPE_FIELDS:
            setattr(c, field, s.get(field) or 0.0)
        c.truncate = int(s.get("truncate", True) is not False)
    except (TypeError, OverflowError) as e:
        raise BadArgumentError(f"rope scaling: theta and {', '.join(_ROPE_FIELDS)} must be numbers: {e}") from None
    return c


def rope_parameters(head_dim, theta=10000.0, scaling=None):
    """(inv_freq, attention_factor): fp32 numpy [head_dim/2] inverse frequencies for rope and the
    factor HF multiplies cos and sin by (yarn's mscale, else 1), as transformers'
    ROPE_INIT_FUNCTIONS compute them for theta and the rope_scaling dict (rope_scaling())."""
    c = rope_scaling(theta, scaling)
    out = np.empty(max(int(head_dim) // 2, 1), np.float32)
    factor = ffi.new("float *")
    check(opslib.dataflow_rope_inv_freq(head_dim, c, ffi.cast("float *", ffi.from_buffer(out)), factor))
    return out, factor[0]


def rope_inv_freq(head_dim, theta=10000.0, scaling=None):
    """rope_parameters' inv_freq: HF's default frequencies, or with scaling (a dict like HF's
    rope_scaling) its linear, llama3 or yarn ones."""
    return rope_parameters(head_dim, theta, scaling)[0]


def _rope(h, name, x, positions, inv_freq, out, stream):
    in_name, out_name = ("x", "out") if name == "rope" else ("dy", "dx")
    x = check_array(h, x, f"{name}: {in_name}")
    head_dim = x.shape[-1] if x.shape else 0
    positions = _index_array(h, positions, f"{name} positions", ("int32",))
    if not isinstance(inv_freq, Array):
        inv_freq = np.asarray(inv_freq)
        if inv_freq.dtype != np.float32 or inv_freq.shape != (head_dim // 2,):
            raise BadArgumentError(f"{name}: inv_freq must be float32 of shape {(head_dim // 2,)}, "
                                   f"got {inv_freq.dtype}{inv_freq.shape}")
        inv_freq = h.from_numpy(inv_freq)
    return _op[name](h, stream, positions=positions, inv_freq=inv_freq, **{in_name: x, out_name: out})


def rope(h, x, positions, inv_freq, out=None, stream=0):
    """Rotary embedding, HF Llama rotate_half convention, on x [tokens, heads, head_dim].
    positions: int32 [tokens] (numpy or device); inv_freq: fp32 [head_dim/2] from
    rope_inv_freq (numpy or device). out may be x (in place). Returns out."""
    return _rope(h, "rope", x, positions, inv_freq, out, stream)


def rope_bwd(h, dy, positions, inv_freq, dx=None, stream=0):
    """dx = the inverse rotation of dy (the gradient of rope); dx may be dy. Returns dx."""
    return _rope(h, "rope_bwd", dy, positions, inv_freq, dx, stream)
def adamw_step(h, param, grad, m, v, step, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, master=None,
               scale=None, stream=0):
    """One torch.optim.AdamW step in place on param, m, v (and master): param fp32 or bf16,
    grad fp32 or bf16, m and v fp32, master an optional fp32 copy of a bf16 param, scale an
    optional device fp32 [1] multiplying the gradient (clip_by_global_norm's output).
    step counts from 1. Returns param."""
    beta1, beta2 = betas
    return _op["adamw_step"](h, stream, param=param, grad=grad, m=m, v=v, master=master, scale=scale, lr=lr,
                             beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, step=step)[0]


def adamw_step_bf16_state(h, param, grad, m, v, step, seed=0, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                          weight_decay=1e-2, master=None, scale=None, stream=0):
    """adamw_step with bf16 m and v: updated in fp32, written back with stochastic rounding
    drawn from a counter-based hash of (seed, step, element index), so the bits do not depend
    on threading. seed: an unsigned 64-bit integer. Returns param."""
    beta1, beta2 = betas
    return _op["adamw_step_bf16_state"](h, stream, param=param, grad=grad, m=m, v=v, master=master, scale=scale,
                                        lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay,
                                        step=step, seed=seed)[0]


ADAMW_8BIT_BLOCK = opslib.DATAFLOW_ADAMW_8BIT_BLOCK
ADAMW_8BIT_CODES = opslib.DATAFLOW_ADAMW_8BIT_CODES


def adamw_8bit_dynamic_code(signed):
    """The dynamic code of 8-bit optimizer state (dataflow_adamw_8bit_dynamic_code): 256
    fp32 values sorted ascending, signed (for m) or unsigned (for v)."""
    code = ffi.new(f"float[{ADAMW_8BIT_CODES}]")
    opslib.dataflow_adamw_8bit_dynamic_code(int(bool(signed)), code)
    return np.frombuffer(ffi.buffer(code), np.float32).copy()


def adamw_step_8bit(h, param, grad, m, v, m_absmax, v_absmax, qmap_m, qmap_v, step, lr=1e-3, betas=(0.9, 0.999),
                    eps=1e-8, weight_decay=1e-2, master=None, scale=None, stream=0):
    """adamw_step with blockwise 8-bit m and v: uint8 codes into qmap_m / qmap_v (device fp32
    [256], sorted ascending, e.g. adamw_8bit_dynamic_code) times an fp32 absmax per block of
    ADAMW_8BIT_BLOCK elements (m_absmax, v_absmax), dequantized, updated in fp32 and
    requantized in one pass. Returns param."""
    beta1, beta2 = betas
    return _op["adamw_step_8bit"](h, stream, param=param, grad=grad, m=m, v=v, m_absmax=m_absmax, v_absmax=v_absmax,
                                  qmap_m=qmap_m, qmap_v=qmap_v, master=master, scale=scale, lr=lr, beta1=beta1,
                                  beta2=beta2, eps=eps, weight_decay=weight_decay, step=step)[0]


def grad_norm_sq(h, x, out=None, accumulate=False, out_dtype=None, workspace=None, stream=0):
    """out[0] = (out[0] if accumulate else 0) + sum(x^2), fp64 accumulation, the same bits
    for any thread count. out: fp32 or fp64 [1] (default fp32). workspace: fp64 scratch of
    grad_norm_sq_workspace_bytes(x.size) bytes, allocated when not given. Returns out."""
    x = check_array(h, x, "grad_norm_sq x")
    out_dtype = out_dtype or (out.dtype if out is not None else "fp32")
    if out is None:
        if accumulate:
            raise BadArgumentError("grad_norm_sq: accumulate=True needs out")
        out = h.empty((1,), out_dtype)
    if check_array(h, out, "grad_norm_sq out").dtype != out_dtype or out.size != 1:
        raise BadArgumentError(f"grad_norm_sq: out must be {out_dtype} of 1 element, got {out.dtype}{out.shape}")
    nbytes = opslib.dataflow_grad_norm_sq_workspace_bytes(x.size)
    if workspace is None:
        workspace = h.empty((nbytes // 8,), "fp64")
    if check_array(h, workspace, "grad_norm_sq workspace").nbytes < nbytes:
        raise BadArgumentError(f"grad_norm_sq: workspace must hold {nbytes} bytes, got {workspace.nbytes}")
    check(opslib.dataflow_submit_grad_norm_sq(h._ptr(), stream, dtypes.enum(x.dtype), dtypes.enum(out.dtype), x.size,
                                              x.cdata, workspace.cdata, out.cdata, int(bool(accumulate))))
    return out


def grad_norm_sq_workspace_bytes(n):
    return opslib.dataflow_grad_norm_sq_workspace_bytes(n)


def clip_by_global_norm(h, sumsq, max_norm, scale=None, norm=None, stream=0):
    """scale = min(1, max_norm / (sqrt(sumsq) + 1e-6)) and norm = sqrt(sumsq), as
    torch.nn.utils.clip_grad_norm_, into device fp32 [1] arrays (allocated when not given);
    pass scale to adamw_step. Returns (scale, norm)."""
    norm = norm if norm is not None else h.empty((1,), "fp32")
    return _op["clip_by_global_norm"](h, stream, sumsq=sumsq, max_norm=max_norm, scale=scale, norm=norm)
def cross_entropy(h, logits, labels, ignore_index=-100, scale=None, dlogits=None, stream=0):
    """Softmax cross-entropy forward and backward in one pass per row of logits [tokens, vocab]:
    loss[t] = logsumexp(logits[t]) - logits[t, labels[t]] (fp32) and
    dlogits = scale * (softmax(logits) - onehot(labels)) in logits' dtype. Rows labelled
    ignore_index get loss 0 and zero gradient. scale defaults to 1 / (number of valid tokens),
    the gradient of the mean loss. dlogits: an array to fill, None (a new one) or "inplace"
    (overwrite logits). labels: numpy integers (validated, uploaded) or a device int32 array
    (labels outside [0, vocab) other than ignore_index then give loss 0, zero gradient; with
    scale=None they are read back to count the valid tokens). Returns (loss, dlogits)."""
    logits = check_array(h, logits, "cross_entropy: logits")
    if len(logits.shape) != 2:
        raise BadArgumentError(f"cross_entropy: logits must be 2-D [tokens, vocab], got shape {logits.shape}")
    tokens, vocab = logits.shape
    if not isinstance(ignore_index, (int, np.integer)) or not -2**31 <= ignore_index < 2**31:
        raise BadArgumentError(f"cross_entropy: ignore_index must be an int32, got {ignore_index!r}")
    if isinstance(labels, Array):
        host_labels = labels.numpy() if scale is None and labels.shape == (tokens,) else None
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
    if scale is None and host_labels is not None:
        valid = int(np.count_nonzero((host_labels != ignore_index) & (host_labels >= 0) & (host_labels < vocab)))
        scale = 1.0 / valid if valid else 0.0
    if isinstance(dlogits, str):
        if dlogits != "inplace":
            raise BadArgumentError(f"cross_entropy: dlogits must be an Array, None or 'inplace', got {dlogits!r}")
        dlogits = logits
    return _op["cross_entropy"](h, stream, logits=logits, labels=labels, dlogits=dlogits,
                                ignore_index=ignore_index, scale=scale)
def _cu_seqlens(h, cu_seqlens, total, stream, name="cu_seqlens", total_name="total_tokens"):
    """cu_seqlens as a device int32 array: a numpy array is validated (starts at 0, never
    decreases, ends at total) and uploaded; a device array is used as is (kernels treat bad
    offsets safely, see ops.h)."""
    if isinstance(cu_seqlens, Array):
        if cu_seqlens.dtype != "int32" or len(cu_seqlens.shape) != 1 or cu_seqlens.size < 2:
            raise BadArgumentError(f"attention: {name} must be int32 of shape (num_seqs + 1,), got "
                                   f"{cu_seqlens.dtype}{cu_seqlens.shape}")
        return cu_seqlens
    cu = np.asarray(cu_seqlens)
    if cu.ndim != 1 or cu.size < 2 or not np.issubdtype(cu.dtype, np.integer):
        raise BadArgumentError(f"attention: {name} must be a 1-D integer array of num_seqs + 1 >= 2 offsets, "
                               f"got {cu.dtype}{cu.shape}")
    if cu[0] != 0:
        raise BadArgumentError(f"attention: {name}[0] must be 0, got {cu[0]}")
    down = np.flatnonzero(np.diff(cu) < 0)
    if down.size:
        i = int(down[0]) + 1
        raise BadArgumentError(f"attention: {name} must be non-decreasing, but {name}[{i}] = {cu[i]} < "
                               f"{name}[{i - 1}] = {cu[i - 1]}")
    if cu[-1] != total:
        raise BadArgumentError(f"attention: {name}[{cu.size - 1}] must equal {total_name} = {total}, "
                               f"got {cu[-1]}")
    return h.from_numpy(cu.astype(np.int32), stream=stream)



def _cu_seqlens_pair(h, cu_seqlens_q, cu_seqlens_k, total_q, total_k, stream, op):
    """attention_kv's query and key offsets (_cu_seqlens each), of the same length."""
    cu_q = _cu_seqlens(h, cu_seqlens_q, total_q, stream, "cu_seqlens_q", "total_q")
    cu_k = _cu_seqlens(h, cu_seqlens_k, total_k, stream, "cu_seqlens_k", "total_k")
    if cu_q.size != cu_k.size:
        raise BadArgumentError(f"{op}: cu_seqlens_q and cu_seqlens_k must have the same length "
                               f"(num_seqs + 1), got {cu_q.size} and {cu_k.size}")
    return cu_q, cu_k

def _attention_shapes(q, k, v, op="attention"):
    """(q tokens, k tokens, q heads, kv heads, head_dim) of checked q, k, v; attention (op ==
    "attention") also needs as many k tokens as q tokens, attention_kv does not."""
    if len(q.shape) != 3 or len(k.shape) != 3 or k.shape != v.shape:
        raise BadArgumentError(f"{op}: q must be (tokens, q_heads, head_dim) and k, v (tokens, kv_heads, "
                               f"head_dim) alike, got {q.shape}, {k.shape}, {v.shape}")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise BadArgumentError(f"attention: q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    (total_q, hq, d), (total_k, hkv, dk) = q.shape, k.shape
    if dk != d or (op == "attention" and total_k != total_q):
        tokens = f"{total_q} tokens and " if op == "attention" else ""
        raise BadArgumentError(f"{op}: k/v {k.shape} must have q's {tokens}head_dim {d}")
    if hq % hkv:
        raise BadArgumentError(f"attention: num_q_heads ({hq}) must be a multiple of num_kv_heads ({hkv})")
    return total_q, total_k, hq, hkv, d


def _check_like(h, x, what, shape, dtype):
    if check_array(h, x, f"attention {what}").shape != tuple(shape) or x.dtype != dtype:
        raise BadArgumentError(f"attention: {what} must be {dtype}{tuple(shape)}, got {x.dtype}{x.shape}")
    return x


def _window(window, causal, op):
    """A checked sliding window (Mistral's: query i sees keys i - window < j <= i; 0 is none)."""
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 0:
        raise BadArgumentError(f"{op}: window must be an int >= 0 (0: no sliding window), got {window!r}")
    if window and not causal:
        raise BadArgumentError(f"{op}: window {window} needs causal=True (a sliding window looks back only)")
    return int(window)


def attention(h, q, k, v, cu_seqlens, scale=None, causal=True, window=0, out=None, lse=None, stream=0):
    """Softmax attention over packed variable-length sequences (see ops.h):
    q (tokens, q_heads, head_dim), k/v (tokens, kv_heads, head_dim), cu_seqlens the num_seqs + 1
    sequence offsets (numpy or device int32). scale defaults to 1/sqrt(head_dim). window > 0
    (causal only) is a sliding window: query i sees keys i - window < j <= i.
    Returns (out like q, lse fp32 (q_heads, tokens))."""
    q = check_array(h, q, "attention: q")
    cu = _cu_seqlens(h, cu_seqlens, q.shape[0] if q.shape else 0, stream)
    return _op["attention"](h, stream, q=q, k=k, v=v, cu_seqlens=cu, out=out, lse=lse, num_seqs=cu.size - 1,
                            scale=_default_scale(scale, q), causal=causal, window=_window(window, causal, "attention"))


def attention_kv(h, q, k, v, cu_seqlens_q, cu_seqlens_k, scale=None, causal=True, window=0, out=None, lse=None,
                 stream=0):
    """Forward attention with separate query and key sequences (FlashAttention varlen with
    cu_seqlens_q and cu_seqlens_k, see ops.h): q (total_q, q_heads, head_dim), k/v (total_k,
    kv_heads, head_dim), e.g. new tokens over a KV cache. Causal masking is bottom-right aligned:
    query i of q_len sees key j of k_len when j <= i + k_len - q_len. Returns (out like q, lse fp32
    (q_heads, total_q))."""
    q, k = check_array(h, q, "attention_kv: q"), check_array(h, k, "attention_kv: k")
    cu_q, cu_k = _cu_seqlens_pair(h, cu_seqlens_q, cu_seqlens_k, q.shape[0] if q.shape else 0,
                                  k.shape[0] if k.shape else 0, stream, "attention_kv")
    return _op["attention_kv"](h, stream, q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, out=out, lse=lse,
                               num_seqs=cu_q.size - 1, scale=_default_scale(scale, q), causal=causal,
                               window=_window(window, causal, "attention_kv"))


def _default_scale(scale, q):
    """attention's scale: 1/sqrt(head_dim) unless given."""
    return 1.0 / q.shape[-1] ** 0.5 if scale is None and q.shape else scale


def attention_bwd(h, dout, q, k, v, out, lse, cu_seqlens, scale=None, causal=True, window=0, dq=None, dk=None, dv=None,
                  workspace=None, stream=0):
    """Gradients of attention() given dout and its (out, lse); deterministic. Returns (dq, dk, dv).
    workspace: a device array of at least dataflow_attention_bwd_workspace_bytes; by default one
    is allocated, and freeing it on return waits for the handle's queued work."""
    q, k, v = check_array(h, q, "attention q"), check_array(h, k, "attention k"), check_array(h, v, "attention v")
    total, _, hq, hkv, d = _attention_shapes(q, k, v)
    _check_like(h, dout, "dout", q.shape, q.dtype)
    _check_like(h, out, "out", q.shape, q.dtype)
    _check_like(h, lse, "lse", (hq, total), "fp32")
    cu = _cu_seqlens(h, cu_seqlens, total, stream)
    dq = _check_like(h, dq, "dq", q.shape, q.dtype) if dq is not None else h.empty(q.shape, q.dtype)
    dk = _check_like(h, dk, "dk", k.shape, k.dtype) if dk is not None else h.empty(k.shape, k.dtype)
    dv = _check_like(h, dv, "dv", v.shape, v.dtype) if dv is not None else h.empty(v.shape, v.dtype)
    scale = 1.0 / d ** 0.5 if scale is None else float(scale)
    nbytes = opslib.dataflow_attention_bwd_workspace_bytes(total, cu.size - 1, hq, hkv, d)
    if nbytes < 0:
        raise BadArgumentError(f"attention_bwd: invalid sizes: {total} tokens, {hq}/{hkv} heads, head_dim {d}")
    if workspace is None:
        workspace = h.empty((nbytes,), "uint8")
    check_array(h, workspace, "attention_bwd workspace")
    check(opslib.dataflow_submit_attention_bwd(h._ptr(), stream, dtypes.enum(q.dtype), dout.cdata, q.cdata, k.cdata,
                                               v.cdata, out.cdata, lse.cdata, cu.cdata, dq.cdata, dk.cdata, dv.cdata,
                                               workspace.cdata, workspace.nbytes, total, cu.size - 1, hq, hkv, d, scale,
                                               int(bool(causal)), _window(window, causal, "attention_bwd")))
    return dq, dk, dv


def attention_kv_bwd(h, dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, scale=None, causal=True, window=0, dq=None,
                     dk=None, dv=None, workspace=None, stream=0):
    """Gradients of attention_kv() given dout and its (out, lse); deterministic. Returns (dq, dk, dv):
    dq like q; dk, dv fp32 like k, ACCUMULATED: pass the fp32 arrays of an earlier call to add
    this call's gradients (a K/V context's keys over the chunks that attend to them); by default
    zero-filled new ones. workspace as attention_bwd's."""
    q, k, v = check_array(h, q, "attention q"), check_array(h, k, "attention k"), check_array(h, v, "attention v")
    total_q, total_k, hq, hkv, d = _attention_shapes(q, k, v, "attention_kv_bwd")
    _check_like(h, dout, "dout", q.shape, q.dtype)
    _check_like(h, out, "out", q.shape, q.dtype)
    _check_like(h, lse, "lse", (hq, total_q), "fp32")
    cu_q, cu_k = _cu_seqlens_pair(h, cu_seqlens_q, cu_seqlens_k, total_q, total_k, stream, "attention_kv_bwd")
    dq = _check_like(h, dq, "dq", q.shape, q.dtype) if dq is not None else h.empty(q.shape, q.dtype)
    grads = []
    for name, g in (("dk", dk), ("dv", dv)):
        grads.append(_check_like(h, g, name, k.shape, "fp32") if g is not None else h.zeros(k.shape, "fp32", stream))
    dk, dv = grads
    scale = 1.0 / d ** 0.5 if scale is None else float(scale)
    nbytes = opslib.dataflow_attention_bwd_workspace_bytes(total_q, cu_q.size - 1, hq, hkv, d)
    if nbytes < 0:
        raise BadArgumentError(f"attention_kv_bwd: invalid sizes: {total_q} queries, {hq}/{hkv} heads, "
                               f"head_dim {d}")
    if workspace is None:
        workspace = h.empty((nbytes,), "uint8")
    check_array(h, workspace, "attention_kv_bwd workspace")
    check(opslib.dataflow_submit_attention_kv_bwd(h._ptr(), stream, dtypes.enum(q.dtype), dout.cdata, q.cdata,
                                                  k.cdata, v.cdata, out.cdata, lse.cdata, cu_q.cdata, cu_k.cdata,
                                                  dq.cdata, ffi.cast("float *", dk.cdata),
                                                  ffi.cast("float *", dv.cdata), workspace.cdata, workspace.nbytes,
                                                  total_q, total_k, cu_q.size - 1, hq, hkv, d, scale,
                                                  int(bool(causal)), _window(window, causal, "attention_kv_bwd")))
    return dq, dk, dv

def _rows(x, what):
    """(rows, last dimension) of an array taken as rows over its last dimension."""
    if len(x.shape) == 0 or x.size == 0:
        raise BadArgumentError(f"{what}: expected a non-empty array with at least 1 dimension, got shape {x.shape}")
    return x.size // x.shape[-1], x.shape[-1]


def _like(h, given, shape, dtype, what):
    """given if it has shape and dtype (else an error), or a new array."""
    if given is None:
        return h.empty(shape, dtype)
    if check_array(h, given, what).shape != tuple(shape) or given.dtype != dtype:
        raise BadArgumentError(f"{what} must be {dtype}{tuple(shape)}, got {given.dtype}{given.shape}")
    return given


def _check_rstd(h, rstd, rows, op):
    if check_array(h, rstd, f"{op} rstd").size != rows or rstd.dtype != "fp32":
        raise BadArgumentError(f"{op}: rstd must be fp32 with {rows} elements (one per row), got "
                               f"{rstd.dtype}{rstd.shape}")
    return rstd


_RMS_NORM = _op["rms_norm"].renamed(y="out")


def rms_norm(h, x, w, eps=1e-6, out=None, rstd=None, stream=0):
    """RMSNorm over the last dimension as Hugging Face LlamaRMSNorm: in fp32,
    rstd = 1 / sqrt(mean(x^2) + eps), out = w * to_dtype(x * rstd). x, w (shape (hidden,))
    and out share a dtype (fp32, fp16, bf16); out may be x. Returns (out, rstd), rstd fp32
    with one value per row (shape x.shape[:-1]), for the backward."""
    if rstd is None:
        rstd = h.empty(check_array(h, x, "rms_norm: x").shape[:-1] or (1,), "fp32")
    return _RMS_NORM(h, stream, x=x, w=w, y=out, rstd=rstd, eps=eps)


def rms_norm_bwd_x(h, dy, x, w, rstd, dx=None, stream=0):
    """dx = rstd * (g - x * rstd^2 * mean(g * x)) with g = dy * w, in fp32, rounded once.
    dy, x, dx share a dtype and shape; rstd is rms_norm's. dx may be dy or x. Returns dx."""
    return _op["rms_norm_bwd_x"](h, stream, dy=dy, x=x, w=w, rstd=rstd, dx=dx)


def rms_norm_bwd_w_workspace_bytes(rows, hidden):
    """Bytes of fp32 workspace rms_norm_bwd_w needs for rows x hidden."""
    return opslib.dataflow_rms_norm_bwd_w_workspace_bytes(rows, hidden)


def rms_norm_bwd_w(h, dy, x, rstd, dw=None, dw_dtype=None, workspace=None, stream=0):
    """dw = sum over rows of dy * (x * rstd), in fp32 in a fixed order (the same bits for any
    thread count), rounded once to dw_dtype (x's dtype or fp32; default: dw's, else x's).
    workspace: fp32 of at least rms_norm_bwd_w_workspace_bytes(rows, hidden) bytes, kept
    untouched until the op has run; when not given, one is made for the call (freed in stream
    order once the op has run). Returns dw."""
    dy, x, rstd = (check_array(h, a, f"rms_norm_bwd_w {n}") for a, n in ((dy, "dy"), (x, "x"), (rstd, "rstd")))
    rows, hidden = _rows(x, "rms_norm_bwd_w x")
    if dy.shape != x.shape or dy.dtype != x.dtype:
        raise BadArgumentError(f"rms_norm_bwd_w: dy must be {x.dtype}{x.shape}, got {dy.dtype}{dy.shape}")
    _check_rstd(h, rstd, rows, "rms_norm_bwd_w")
    dw_dtype = dw_dtype or (dw.dtype if dw is not None else x.dtype)
    dw = _like(h, dw, (hidden,), dw_dtype, "rms_norm_bwd_w dw")
    nbytes = rms_norm_bwd_w_workspace_bytes(rows, hidden)
    if workspace is None:
        workspace = h.empty((nbytes // 4,), "fp32")
    if check_array(h, workspace, "rms_norm_bwd_w workspace").dtype != "fp32" or workspace.nbytes < nbytes:
        raise BadArgumentError(f"rms_norm_bwd_w: workspace must be fp32 of at least {nbytes} bytes, got "
                               f"{workspace.dtype} of {workspace.nbytes}")
    check(opslib.dataflow_submit_rms_norm_bwd_w(h._ptr(), stream, dtypes.enum(x.dtype), dtypes.enum(dw_dtype), rows,
                                                hidden, dy.cdata, x.cdata, rstd.cdata, workspace.cdata, dw.cdata))
    return dw


def swiglu(h, gate, up, out=None, stream=0):
    """out = to_dtype(to_dtype(silu(gate)) * up) in fp32, as F.silu(gate) * up (Hugging Face
    LlamaMLP). gate, up, out share shape and dtype (fp32, fp16, bf16); out may be gate or up."""
    return _op["swiglu"](h, stream, gate=gate, up=up, out=out)


def swiglu_bwd(h, d_out, gate, up, d_gate=None, d_up=None, stream=0):
    """d_up = d_out * silu(gate), d_gate = d_out * up * silu'(gate), in fp32, each rounded
    once. All arrays share shape and dtype; d_gate and d_up may be inputs (not each other).
    Returns (d_gate, d_up)."""
    return _op["swiglu_bwd"](h, stream, d_out=d_out, gate=gate, up=up, d_gate=d_gate, d_up=d_up)


def _paged_pools(h, k_pages, v_pages, op):
    """(num_pages, page_size, kv_heads, head_dim) of checked k_pages, v_pages."""
    k_pages, v_pages = check_array(h, k_pages, f"{op} k_pages"), check_array(h, v_pages, f"{op} v_pages")
    if len(k_pages.shape) != 4 or k_pages.shape != v_pages.shape or k_pages.dtype != v_pages.dtype:
        raise BadArgumentError(f"{op}: k_pages and v_pages must be alike (num_pages, page_size, kv_heads, head_dim), "
                               f"got {k_pages.dtype}{k_pages.shape} and {v_pages.dtype}{v_pages.shape}")
    return k_pages.shape


def _int32_table(h, x, what, shape, stream):
    """A device int32 array of the given shape; numpy input is uploaded (checked by the caller)."""
    if isinstance(x, Array):
        if x.dtype != "int32" or x.shape != tuple(shape):
            raise BadArgumentError(f"{what} must be int32{tuple(shape)}, got {x.dtype}{x.shape}")
        return x
    return h.from_numpy(np.ascontiguousarray(x, dtype=np.int32), stream=stream)


def paged_kv_write(h, k, v, k_pages, v_pages, slot_mapping, stream=0):
    """Writes the K/V rows of new tokens into a paged cache (see ops.h): k/v (tokens, kv_heads,
    head_dim), k_pages/v_pages (num_pages, page_size, kv_heads, head_dim), slot_mapping int32
    (tokens,): token t goes to row slot % page_size of page slot // page_size. numpy slots are
    checked against the pool; a device slot outside it is skipped."""
    num_pages, page_size, _, _ = _paged_pools(h, k_pages, v_pages, "paged_kv_write")
    slots = _index_array(h, slot_mapping, "paged_kv_write: slot_mapping", ("int32",), num_pages * page_size)
    _op["paged_kv_write"](h, stream, k=k, v=v, slot_mapping=slots, k_pages=k_pages, v_pages=v_pages)


def _check_page_tables(page_table, seq_lens, cu, num_pages, page_size):
    """Host tables of paged_attention: each length within the table and at least its query
    count, each page a sequence reads inside the pool (the kernels would give NaN)."""
    page_table, seq_lens = np.asarray(page_table), np.asarray(seq_lens)
    if page_table.ndim != 2 or not np.issubdtype(page_table.dtype, np.integer):
        raise BadArgumentError(f"paged_attention: page_table must be a 2-D integer array (batch, max_pages), "
                               f"got {page_table.dtype}{page_table.shape}")
    batch, max_pages = page_table.shape
    if seq_lens.shape != (batch,) or not np.issubdtype(seq_lens.dtype, np.integer):
        raise BadArgumentError(f"paged_attention: seq_lens must be integers of shape ({batch},), "
                               f"got {seq_lens.dtype}{seq_lens.shape}")
    q_lens = np.diff(cu) if cu is not None and cu.size == batch + 1 else np.zeros(batch, np.int64)  # else named below
    for b in range(batch):
        n = int(seq_lens[b])
        if n < q_lens[b] or n > max_pages * page_size:
            raise BadArgumentError(f"paged_attention: seq_lens[{b}] = {n} must be in [{q_lens[b]} (its new tokens), "
                                   f"{max_pages * page_size} (max_pages * page_size)]")
        used = page_table[b, :-(-n // page_size)]
        bad = np.flatnonzero((used < 0) | (used >= num_pages))
        if bad.size:
            raise BadArgumentError(f"paged_attention: page_table[{b}, {bad[0]}] = {used[bad[0]]} is not a page of "
                                   f"the pool [0, {num_pages})")
    return batch, max_pages


def paged_attention(h, q, k_pages, v_pages, page_table, seq_lens, cu_seqlens_q, scale=None, split_size=512,
                    out=None, lse=None, workspace=None, stream=0):
    """Attention of a batch of sequences' new tokens over K/V in pages (flash-decoding, see
    ops.h): q (total_q, q_heads, head_dim) packed by cu_seqlens_q (batch + 1 offsets),
    k_pages/v_pages (num_pages, page_size, kv_heads, head_dim), page_table int32 (batch,
    max_pages), seq_lens int32 (batch,) keys per sequence (its new tokens' included). Causal
    bottom-right as attention_kv. Keys are cut in splits of split_size (a multiple of 64).
    numpy tables are checked (page ids, lengths) before upload; device tables are used as is.
    Returns (out like q, lse fp32 (q_heads, total_q))."""
    q = check_array(h, q, "paged_attention q")
    num_pages, page_size, hkv, d = _paged_pools(h, k_pages, v_pages, "paged_attention")
    if len(q.shape) != 3 or q.shape[2] != d or q.dtype != k_pages.dtype:
        raise BadArgumentError(f"paged_attention: q must be {k_pages.dtype}(tokens, q_heads, {d}), "
                               f"got {q.dtype}{q.shape}")
    total_q, hq = q.shape[0], q.shape[1]
    if hq % hkv:
        raise BadArgumentError(f"paged_attention: num_q_heads ({hq}) must be a multiple of num_kv_heads ({hkv})")
    cu_host = None if isinstance(cu_seqlens_q, Array) else np.asarray(cu_seqlens_q)
    cu = _cu_seqlens(h, cu_seqlens_q, total_q, stream, "cu_seqlens_q", "total_q")
    if isinstance(page_table, Array):
        if len(page_table.shape) != 2:
            raise BadArgumentError(f"paged_attention: page_table must be int32 (batch, max_pages), "
                                   f"got {page_table.shape}")
        batch, max_pages = page_table.shape
    else:
        if isinstance(seq_lens, Array):
            raise BadArgumentError("paged_attention: page_table and seq_lens must both be numpy or both device arrays")
        batch, max_pages = _check_page_tables(page_table, seq_lens, cu_host, num_pages, page_size)
    if cu.size != batch + 1:
        raise BadArgumentError(f"paged_attention: cu_seqlens_q must have batch + 1 = {batch + 1} offsets, "
                               f"got {cu.size}")
    table = _int32_table(h, page_table, "paged_attention: page_table", (batch, max_pages), stream)
    lens = _int32_table(h, seq_lens, "paged_attention: seq_lens", (batch,), stream)
    out = _check_like(h, out, "out", q.shape, q.dtype) if out is not None else h.empty(q.shape, q.dtype)
    lse = _check_like(h, lse, "lse", (hq, total_q), "fp32") if lse is not None else h.empty((hq, total_q), "fp32")
    nbytes = opslib.dataflow_paged_attention_workspace_bytes(total_q, hq, d, max_pages, page_size, int(split_size))
    if nbytes < 0:
        raise BadArgumentError(f"paged_attention: invalid sizes: {total_q} tokens, {hq} heads, head_dim {d}, "
                               f"{max_pages} pages of {page_size}, split_size {split_size}")
    if workspace is None:
        workspace = h.empty((nbytes,), "uint8")
    scale = 1.0 / d ** 0.5 if scale is None else float(scale)
    check(opslib.dataflow_submit_paged_attention(
        h._ptr(), stream, dtypes.enum(q.dtype), q.cdata, k_pages.cdata, v_pages.cdata, table.cdata, lens.cdata,
        cu.cdata, out.cdata, ffi.cast("float *", lse.cdata), workspace.cdata, workspace.nbytes, total_q, batch,
        num_pages, page_size, max_pages, hq, hkv, d, int(split_size), scale))
    return out, lse


_QMATMUL_INT8 = _op["qmatmul_int8"].renamed(W="w", C="c")
_QMATMUL_INT4 = _op["qmatmul_int4"].renamed(W="w", C="c")


def qmatmul_int8(h, x, w, scales, out=None, c=None, out_dtype=None, stream=0):
    """out = x @ (w * scales[:, None])^T (+ c): x [M, K] fp32/bf16, w int8 [N, K] (a Linear's
    layout), scales [N] fp32/bf16, out and c [M, N]; fp32 accumulation (the catalogue's
    qmatmul_int8). c may be out. Returns out."""
    if out_dtype is None and out is None and c is None:
        out_dtype = check_array(h, x, "qmatmul_int8: x").dtype
    return _QMATMUL_INT8(h, stream, out_dtype=out_dtype, x=x, W=w, scales=scales, C=c, out=out)


def qmatmul_int4(h, x, w, scales, group_size, zeros=None, out=None, c=None, out_dtype=None, stream=0):
    """out = x @ dequant(w)^T (+ c) with int4 codes packed two per byte along k: x [M, K]
    fp32/bf16, w uint8 [N, cdiv(K, 2)], scales [N, cdiv(K, group_size)] fp32/bf16, zeros
    uint8 of the scales' shape or None (symmetric, zero 8); group_size 32..128, a multiple of
    32 (the catalogue's qmatmul_int4). c may be out. Returns out."""
    from .quantize import check_group_size
    group_size = check_group_size(group_size, "qmatmul_int4: group_size")
    if out_dtype is None and out is None and c is None:
        out_dtype = check_array(h, x, "qmatmul_int4: x").dtype
    return _QMATMUL_INT4(h, stream, out_dtype=out_dtype, group_size=group_size, x=x, W=w, scales=scales,
                               zeros=zeros, C=c, out=out)

def _moe_ids(h, topk_ids, op):
    """(tokens, top_k) of an int32 [tokens, top_k] device array of expert ids."""
    if len(check_array(h, topk_ids, f"{op} topk_ids").shape) != 2 or topk_ids.dtype != "int32":
        raise BadArgumentError(f"{op}: topk_ids must be int32 [tokens, top_k], got {topk_ids.dtype}{topk_ids.shape}")
    return topk_ids.shape


def moe_router(h, logits, top_k, norm_topk_prob=False, probs=None, topk_weights=None, topk_ids=None, stream=0):
    """Mixtral / Qwen3-MoE routing of fp32 router logits [tokens, experts]: probs = softmax,
    topk_ids = torch.topk(probs, top_k) (torch's CPU order, ties included), topk_weights = their
    probs, renormalized to sum 1 when norm_topk_prob. Returns (probs, topk_weights fp32
    [tokens, top_k], topk_ids int32 [tokens, top_k])."""
    logits = check_array(h, logits, "moe_router: logits")
    experts = logits.shape[-1] if logits.shape else 0
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or not 0 < top_k <= experts:
        raise BadArgumentError(f"moe_router: top_k must be an integer in [1, {experts}] (the experts), got {top_k!r}")
    return _op["moe_router"](h, stream, logits=logits, top_k=top_k, norm_topk_prob=norm_topk_prob, probs=probs,
                             topk_weights=topk_weights, topk_ids=topk_ids)


def moe_router_bwd(h, d_topk_weights, probs, topk_ids, norm_topk_prob=False, d_logits=None, stream=0):
    """d_logits (fp32 [tokens, experts], written) from d_topk_weights [tokens, top_k] through
    moe_router's renormalization and softmax, given its probs and topk_ids. Returns d_logits."""
    return _op["moe_router_bwd"](h, stream, d_topk_weights=d_topk_weights, probs=probs, topk_ids=topk_ids,
                                 norm_topk_prob=norm_topk_prob, d_logits=d_logits)


def moe_router_stats(h, probs, topk_ids, stats, stream=0):
    """Adds one layer's routing to stats (fp32 [2, experts], zero before the first layer): row 0
    counts each expert's assignments, row 1 sums its probs over tokens. Returns stats."""
    return _op["moe_router_stats"](h, stream, probs=probs, topk_ids=topk_ids, stats=stats)


def _moe_rows(rows, op):
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows <= 0:
        raise BadArgumentError(f"{op}: rows must be a positive integer (tokens times layers), got {rows!r}")
    return int(rows)


def moe_aux_loss(h, stats, rows, loss=None, stream=0):
    """HF's load_balancing_loss_func from the stats of every layer (moe_router_stats) and rows =
    tokens * layers: experts * sum_e (counts_e / rows) * (prob_sums_e / rows). Returns loss, an
    fp32 [1] device array."""
    return _op["moe_aux_loss"](h, stream, stats=stats, rows=_moe_rows(rows, "moe_aux_loss"), loss=loss)


def moe_aux_loss_bwd(h, stats, probs, rows, d_logits, d_loss=1.0, stream=0):
    """Adds d_loss times the gradient of moe_aux_loss with respect to one layer's router logits
    to d_logits (fp32 [tokens, experts]), given that layer's probs. Returns d_logits."""
    return _op["moe_aux_loss_bwd"](h, stream, stats=stats, probs=probs, rows=_moe_rows(rows, "moe_aux_loss_bwd"),
                                   d_logits=d_logits, d_loss=d_loss)


def moe_permute(h, x, topk_ids, experts, x_perm=None, expert_offsets=None, row_map=None, slot_of=None, stream=0):
    """Routes x [tokens, hidden] (fp32, fp16, bf16) to experts by topk_ids (int32 [tokens, top_k]):
    x_perm [tokens * top_k, hidden] holds each expert's tokens in token order, expert after
    expert; expert_offsets int32 [experts + 1] their row ranges, row_map int32 [tokens * top_k]
    each row's token, slot_of int32 [tokens, top_k] each assignment's row. All on the device.
    Returns (x_perm, expert_offsets, row_map, slot_of)."""
    tokens, top_k = _moe_ids(h, topk_ids, "moe_permute")
    if len(check_array(h, x, "moe_permute x").shape) != 2 or x.shape[0] != tokens:
        raise BadArgumentError(f"moe_permute: x must be [{tokens}, hidden] (one row per token), got {x.shape}")
    if isinstance(experts, bool) or not isinstance(experts, (int, np.integer)) or experts < top_k:
        raise BadArgumentError(f"moe_permute: experts must be an integer >= top_k ({top_k}), got {experts!r}")
    n, hidden = tokens * top_k, x.shape[1]
    x_perm = _like(h, x_perm, (n, hidden), x.dtype, "moe_permute x_perm")
    expert_offsets = _like(h, expert_offsets, (int(experts) + 1,), "int32", "moe_permute expert_offsets")
    row_map = _like(h, row_map, (n,), "int32", "moe_permute row_map")
    slot_of = _like(h, slot_of, (tokens, top_k), "int32", "moe_permute slot_of")
    i32 = lambda a: ffi.cast("int32_t *", a.cdata)  # noqa: E731
    check(opslib.dataflow_submit_moe_permute(h._ptr(), stream, dtypes.enum(x.dtype), tokens, int(experts), top_k,
                                             hidden, i32(topk_ids), x.cdata, i32(expert_offsets), i32(row_map),
                                             i32(slot_of), x_perm.cdata))
    return x_perm, expert_offsets, row_map, slot_of


def moe_combine(h, y_perm, slot_of, topk_weights=None, y=None, stream=0):
    """y[t] = sum_j topk_weights[t, j] * y_perm[slot_of[t, j]] in fp32, rounded once (y_perm
    [tokens * top_k, hidden] and y [tokens, hidden] share a dtype). topk_weights None means 1:
    moe_permute's backward (d_x from d_x_perm). Returns y."""
    return _op["moe_combine"](h, stream, y_perm=y_perm, slot_of=slot_of, topk_weights=topk_weights, y=y)


def moe_permute_bwd(h, d_x_perm, slot_of, d_x=None, stream=0):
    """d_x[t] = sum_j d_x_perm[slot_of[t, j]]: the backward of moe_permute. Returns d_x."""
    return moe_combine(h, d_x_perm, slot_of, None, d_x, stream)


def moe_combine_bwd(h, dy, y_perm, slot_of, topk_weights, d_y_perm=None, d_topk_weights=None, stream=0):
    """Gradients of moe_combine: d_y_perm[slot_of[t, j]] = topk_weights[t, j] * dy[t] and
    d_topk_weights[t, j] = dy[t] . y_perm[slot_of[t, j]] (fp32). Returns (d_y_perm, d_topk_weights)."""
    return _op["moe_combine_bwd"](h, stream, dy=dy, y_perm=y_perm, slot_of=slot_of, topk_weights=topk_weights,
                                  d_y_perm=d_y_perm, d_topk_weights=d_topk_weights)


def moe_grouped_matmul(h, x, w, expert_offsets, trans_w=True, out=None, stream=0):
    """One matmul per expert over its rows of x [rows, k_in]: out[r] = x[r] @ op(w[e]) for
    expert_offsets[e] <= r < expert_offsets[e + 1]. trans_w (the forward): w [experts, n_out,
    k_in] as nn.Linear, op = transpose; else w [experts, k_in, n_out] (d_x = dy @ w[e]).
    fp32 or bf16, fp32 accumulation. Returns out [rows, n_out]."""
    if len(check_array(h, w, "moe_grouped_matmul: w").shape) != 3:
        raise BadArgumentError(f"moe_grouped_matmul: w must be [experts, ., .], got {w.shape}")
    experts, n_out, k_in = (w.shape[0], w.shape[1], w.shape[2]) if trans_w else (w.shape[0], w.shape[2], w.shape[1])
    return _op["moe_grouped_matmul"](h, stream, x=x, w=w, expert_offsets=expert_offsets, out=out, experts=experts,
                                     n_out=n_out, k_in=k_in, trans_w=trans_w)


def moe_grouped_matmul_bwd_w(h, dy, x, expert_offsets, d_w, stream=0):
    """d_w[e] += dy[rows of e]^T @ x[rows of e] for the forward out = x @ w[e]^T: dy [rows,
    n_out] and x [rows, k_in] share a dtype; d_w [experts, n_out, k_in] is fp32 or that dtype.
    Returns d_w."""
    return _op["moe_grouped_matmul_bwd_w"](h, stream, dy=dy, x=x, expert_offsets=expert_offsets, d_w=d_w)
