"""A handle's own speeds for the planner: `calibrate(handle)` measures its ops (matmuls, a causal
attention, a memory-bound add, transfers both ways) and, given a model, fits the profile to that
model's layers trained on the handle (the planner's model of time, ring_time.c, at two chunk sizes).

    prof = df.training.calibrate(h, config="llama3-8b", seq_len=1024)
    plan = df.ring.plan("llama3-8b", seq_len=1024, ..., profile=prof)
"""
import math
import time

import numpy as np

from .. import dtypes, ops
from .._ffi import ffi, ringlib
from ..errors import BadArgumentError, check
from ..handle import Handle, parse_bytes
from ..models.config import LlamaConfig
from ..models.llama import Llama
from ..ring import Profile, blocked_ring_model, model_config


def _best_seconds(fn, h, repeats):
    fn()
    h.sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        h.sync()
        best = min(best, time.perf_counter() - t0)
    return best


# calibrate's measurement sizes: name -> the largest accepted (each measures in about a second at
# its default; these bounds keep a typo from allocating more than ~1 GiB of host memory)
CALIBRATE_MAXIMA = {"size": 1 << 14, "tokens": 1 << 16, "heads": 256, "head_dim": 256, "repeats": 1000}


def _calibrate_arguments(values, transfer_bytes, fit_seconds):
    for name, value in values.items():
        top = CALIBRATE_MAXIMA[name]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= top:
            raise BadArgumentError(f"calibrate: {name} must be an integer in 1..{top}, got {value!r:.40}")
    if values["head_dim"] % 2:
        raise BadArgumentError(f"calibrate: head_dim must be even (rotary halves), got {values['head_dim']}")
    if parse_bytes(transfer_bytes, "calibrate: transfer_bytes") > 1 << 30:
        raise BadArgumentError(f"calibrate: transfer_bytes must be at most 1 GiB, got {transfer_bytes!r:.40}")
    if isinstance(fit_seconds, bool) or not isinstance(fit_seconds, (int, float)) or not 0 < fit_seconds < math.inf:
        raise BadArgumentError(f"calibrate: fit_seconds must be a positive number, got {fit_seconds!r:.40}")


def calibrate(handle, size=1024, tokens=1024, heads=8, head_dim=64, transfer_bytes=64 << 20, repeats=3,
              config=None, seq_len=None, dtype="bf16", tokens_per_step=None, fit_seconds=10.0):
    """The `host` profile of a handle, measured: a bf16 and an fp32 matmul (size^3) and a bf16 one
    of size / 16 rows give the peaks (matmul_fraction 1: the planner predicts what these ops
    reach) and matmul_half_tokens (the row count at half rate), a causal attention over
    `tokens` tokens its fraction of the bf16 matmul rate, an fp32 add (3 arrays of size^2 x 4
    elements) the memory-bound speed, transfers of transfer_bytes each way the link. About a second.

    config (a preset, HF config dict or LlamaConfig): then fitted to that model, whose small
    shapes run far from these large-op rates (see _fit_to_model): a two-layer model of its
    shapes trains on one sequence of min(seq_len, 256) tokens (seq_len default: its
    max_position_embeddings) and on tokens_per_step (whole sequences, at least two; default
    four), the smallest and largest chunks a plan runs, in `dtype`, when that is predicted to
    take at most fit_seconds (else the profile's source says it was not fitted)."""
    if not isinstance(handle, Handle):
        raise BadArgumentError(f"calibrate: handle must be a dataflow.Handle, got {type(handle).__name__}")
    _calibrate_arguments({"size": size, "tokens": tokens, "heads": heads, "head_dim": head_dim, "repeats": repeats},
                         transfer_bytes, fit_seconds)
    transfer_bytes = parse_bytes(transfer_bytes)
    cfg = None if config is None else model_config(config)
    if cfg is not None:
        seq_len = cfg.max_position_embeddings if seq_len is None else seq_len
        if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)) or seq_len <= 0:
            raise BadArgumentError(f"calibrate: seq_len must be a positive integer, got {seq_len!r}")
        fit_rows = 4 if tokens_per_step is None else tokens_per_step // seq_len
        if isinstance(tokens_per_step, bool) or fit_rows < 2 or (tokens_per_step or 0) % seq_len:
            raise BadArgumentError(f"calibrate: tokens_per_step must be a multiple of seq_len ({seq_len}), at least "
                                   f"two sequences, got {tokens_per_step!r}")
        if dtype not in ("bf16", "fp32"):
            raise BadArgumentError(f"calibrate: dtype must be 'bf16' or 'fp32', got {dtype!r}")
    h, rng = handle, np.random.default_rng(0)
    x = rng.standard_normal((size, size), dtype=np.float32)
    rates = {}
    for kind in ("bf16", "fp32"):
        a, out = h.from_numpy(x, dtype=kind), h.empty((size, size), "fp32")
        t = _best_seconds(lambda: ops.matmul(h, a, a, out=out, transpose_b=True), h, repeats)
        rates[kind] = 2.0 * size**3 / t
    # the falloff with rows: rate(T) = R T / (T + half) through (size / 16, size) rows, bf16
    rows = max(1, size // 16)
    a, w, out = h.from_numpy(x[:rows], dtype="bf16"), h.from_numpy(x, dtype="bf16"), h.empty((rows, size), "fp32")
    t = _best_seconds(lambda: ops.matmul(h, a, w, out=out, transpose_b=True), h, repeats)
    r = (2.0 * rows * size * size / t) / rates["bf16"]
    half = rows * size * (1 - r) / (r * size - rows) if r * size > rows and r < 1 else 0.0
    rates = {k: v * (size + half) / size for k, v in rates.items()}  # R: the large-shape rate
    q = h.from_numpy(rng.standard_normal((tokens, heads, head_dim), dtype=np.float32), dtype="bf16")
    cu = h.from_numpy(np.array([0, tokens], np.int32))
    att_out, lse = h.empty(q.shape, "bf16"), h.empty((heads, tokens), "fp32")
    t = _best_seconds(lambda: ops.attention(h, q, q, q, cu, out=att_out, lse=lse), h, repeats)
    attention_rate = 4.0 * heads * head_dim * tokens * (tokens + 1) / 2 / t
    big = rng.standard_normal(4 * size * size, dtype=np.float32)
    u, w = h.from_numpy(big), h.from_numpy(big)
    s = h.empty(big.shape, "fp32")
    t = _best_seconds(lambda: ops.add(h, u, w, out=s), h, repeats)
    memory_rate = 3.0 * big.nbytes / t
    host = np.zeros(max(1, int(transfer_bytes) // 4), np.float32)
    dev = h.empty(host.shape, "fp32")
    h2d = host.nbytes / _best_seconds(lambda: h.inbound_transfer(dev, host), h, repeats)
    d2h = host.nbytes / _best_seconds(lambda: dev.numpy(), h, repeats)
    c = ffi.new("Dataflow_Device_Profile *")
    c.name = b"host"
    c.peak_flops_bf16, c.peak_flops_fp32 = rates["bf16"], rates["fp32"]
    c.matmul_fraction, c.matmul_half_tokens = 1.0, half
    c.attention_fraction = min(1.0, attention_rate / rates["bf16"])
    c.memory_bytes_per_sec, c.h2d_bytes_per_sec, c.d2h_bytes_per_sec = memory_rate, h2d, d2h
    source = ffi.new("char[]", f"measured by dataflow.training.calibrate on a {h.backend} handle: matmul {size}^3, "
                               f"causal attention {tokens} tokens x {heads} heads x {head_dim}, add of "
                               f"{big.nbytes >> 20} MiB, {host.nbytes} byte transfers".encode())
    c.source = source
    measured = {"matmul_flops_bf16": rates["bf16"], "matmul_flops_fp32": rates["fp32"]}
    if cfg is None:
        return Profile(c, keep=source, measured=measured)
    fit = _fit_to_model(h, c, cfg, int(seq_len), int(fit_rows), dtype, repeats, fit_seconds)
    source = ffi.new("char[]", ffi.string(source) + f"; {fit}".encode())
    c.source = source
    return Profile(c, keep=source, measured=measured)


def _layer_seconds(h, cfg, dtype, shapes, repeats):
    """{(rows, seq): seconds of a layer's forward + backward (save level "all")} when a two-layer
    model of cfg's shapes trains on `rows` sequences of `seq` tokens, for each shape, from the
    model's trace: the shapes take turns, so load coming and going on a shared machine hits all
    alike, and the least loaded step of each counts (this machine's speed, not its neighbours')."""
    from .trainer import Trainer  # which calibrates its default profile through ring_training
    small = LlamaConfig.from_dict({**cfg.to_dict(), "num_hidden_layers": 2, "max_position_embeddings": max(
        [seq for _, seq in shapes] + [cfg.max_position_embeddings])})
    model = Llama(h, small, dtype=dtype, seed=0, save_level="all")
    rng = np.random.default_rng(0)
    batches = {shape: rng.integers(0, small.vocab_size, shape) for shape in shapes}
    order = [shape for _ in range(repeats) for shape in shapes]
    try:
        trainer = Trainer(model, lr=1e-6)
        for shape in shapes:  # warm-up: first-use costs (kernel setup, primitive caches)
            trainer.step(batches[shape])
        trainer.start_trace()
        for shape in order:
            trainer.step(batches[shape])
        spans, _ = trainer.trace_events()
        trainer.stop_trace()
    finally:
        model.close()
    per_step = {}
    for s in spans:
        if 1 <= s["block"] <= 2 and s["what"] in ("forward", "backward"):
            per_step[s["step"]] = per_step.get(s["step"], 0.0) + (s["end"] - s["start"]) / 2
    best = {}
    for shape, step in zip(order, sorted(per_step)):
        best[shape] = min(best.get(shape, np.inf), per_step[step])
    return best


SMALLEST_PIECE = 256  # the smallest chunk the planner cuts a long sequence into (ring_plan.c)


def _fit_to_model(h, c, cfg, seq_len, n, dtype, repeats, budget):
    """Fits the measured profile c to the model (see _fit_rates) from a layer's forward + backward
    measured at the smallest and the largest chunk a plan runs: one sequence of
    min(seq_len, SMALLEST_PIECE) tokens and n sequences of seq_len, unless that would take more
    than budget seconds; returns what was done, for the profile's source."""
    _, blocks = blocked_ring_model(cfg, dtype)
    layer = blocks[1]
    shapes = [(1, min(seq_len, SMALLEST_PIECE)), (n, seq_len)]
    # steps (warm-up + 4 x repeats) x 2 layers x both shapes; small shapes ran 3x slower than
    # the large ops here: 4x is the margin
    estimate = (1 + 4 * repeats) * 2 * 4 * sum(_layer_model_seconds(c, layer, dtype, seq, rows * seq)
                                               for rows, seq in shapes)
    if estimate > budget:
        return f"not fitted to the model: measuring its layers would take ~{estimate:.0f} s (budget {budget:g} s)"
    measured = _layer_seconds(h, cfg, dtype, shapes, 4 * repeats)
    points = [(rows * seq, seq, measured[(rows, seq)]) for rows, seq in shapes]
    s, half = _fit_rates(c, layer, dtype, points)
    return (f"fitted to a {dtype} layer of this model: forward + backward " +
            ", ".join(f"{t * 1e3:.2f} ms at {T} tokens" for T, _, t in points) +
            f"; rates x{s:.3g}, matmul_half_tokens {half:.0f}")


def _layer_model_seconds(c, layer, dtype, seq_len, T):
    """The planner's time (dataflow_ring_layer_seconds) for a layer's forward + backward at save
    level all over a chunk of T tokens (whole sequences of seq_len), without the matmul falloff."""
    flat = ffi.new("Dataflow_Device_Profile *", c[0])
    flat.matmul_half_tokens = 0
    seconds = ffi.new("double *")
    check(ringlib.dataflow_ring_layer_seconds(flat, ffi.addressof(layer), dtypes.enum(dtype), seq_len, T, seconds))
    return seconds[0]


def _fit_rates(c, layer, dtype, points):
    """Scales profile c's rates so that the planner's time for a layer's forward + backward over
    a chunk of T tokens (ring_time.c, save level all),
        (P(T) + 3 F half / R) / s,   P(T): _layer_model_seconds,
    equals the measured seconds at both points [(T, seq_len, seconds), ...], the smaller chunk
    first (F: the layer's matmul flops per token, R: the matmul rate). s scales every rate (the
    model's shapes against the large ops measured) and half is matmul_half_tokens, which absorbs
    what a chunk costs whatever its size (op launches, small-shape kernels). s > 1 raises the
    peaks (fractions stay <= 1). Returns (s, half)."""
    R = (c.peak_flops_bf16 if dtype == "bf16" else c.peak_flops_fp32) * c.matmul_fraction
    F = layer.matmul_flops_per_token
    (T1, S1, q1), (T2, S2, q2) = points
    p1, p2 = _layer_model_seconds(c, layer, dtype, S1, T1), _layer_model_seconds(c, layer, dtype, S2, T2)
    s = (p2 - p1) / (q2 - q1) if q2 > q1 else 0.0
    half = (s * q1 - p1) * R / (3 * F) if s > 0 else -1.0
    if not half >= 0:  # noise, or no fixed cost to see: the large chunk's rate alone
        s, half = p2 / q2, 0.0
    if s <= 1:
        c.matmul_fraction *= s
        c.attention_fraction *= s
    else:
        c.peak_flops_bf16 *= s
        c.peak_flops_fp32 *= s
    c.memory_bytes_per_sec *= s
    c.matmul_half_tokens = half
    return s, half
