"""The ring planner (libdataflowring/include/dataflow/ring_plan.h) from Python.

    plan = df.ring.plan("llama3-8b", seq_len=8192, tokens_per_step=65536, device_memory="24GiB",
                        host_memory="128GiB", profile="h100-sxm", dtype="bf16")
    print(plan.describe()); plan.predicted_step_seconds

Profiles: the built-in named ones (`profile_names()`), or `calibrate(handle)`: the handle's own
speeds, measured on its ops (a matmul, an attention, a memory-bound add, transfers both ways).
"""
import math
import time

import numpy as np

from . import dtypes, model_specs, ops
from .c_strings import c_bytes
from ._ffi import ffi, modelslib, ringlib
from .errors import BadArgumentError, check, error_for
from .handle import Handle, parse_bytes
from .models.config import LlamaConfig, checked_config
from .models.host_blocks import scratch_blocked_model

def profile_names():
    """The built-in device profiles' names."""
    names, i = [], 0
    while (name := ringlib.dataflow_device_profile_name(i)) != ffi.NULL:
        names.append(ffi.string(name).decode())
        i += 1
    return names


class Profile:
    """A device profile: the speeds the planner's model of time uses (device_profile.h).
    `measured`: calibrate's raw measurements before any fit to a model ({} for a named profile):
    matmul_flops_bf16 and matmul_flops_fp32, the large-shape rates of its size^3 matmuls."""

    def __init__(self, cdata, keep=None, measured=None):
        self._c, self._keep = cdata, keep  # keep: the source string's owner for measured ones
        self.measured = dict(measured or {})

    @classmethod
    def named(cls, name):
        if not isinstance(name, str):
            raise BadArgumentError(f"profile: expected a name ({', '.join(profile_names())}), got {name!r}")
        c = ffi.new("Dataflow_Device_Profile *")
        check(ringlib.dataflow_device_profile_named(c_bytes(name, "profile"), c))
        return cls(c)

    def __getattr__(self, field):
        if field.startswith("_"):
            raise AttributeError(field)
        value = getattr(self._c, field)
        if field in ("name", "source"):
            return ffi.string(value).decode() if value != ffi.NULL else ""
        return value

    def __repr__(self):
        return (f"Profile({self.name!r}: bf16 peak {self.peak_flops_bf16:.3g} flop/s, matmul x{self.matmul_fraction:.2f}, "
                f"attention x{self.attention_fraction:.2f}, memory {self.memory_bytes_per_sec:.3g} B/s, "
                f"h2d {self.h2d_bytes_per_sec:.3g} B/s, d2h {self.d2h_bytes_per_sec:.3g} B/s)")


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
    cfg = None if config is None else _llama_config(config)
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
    source = ffi.new("char[]", f"measured by dataflow.ring.calibrate on a {h.backend} handle: matmul {size}^3, "
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
    from .models.llama import Llama
    from .models.trainer import Trainer
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
    _, blocks = _ring_model(cfg, dtype)
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


def _llama_config(config):
    if isinstance(config, str):
        config = model_specs.resolve(config, "plan: config")[1]
    if isinstance(config, (dict, LlamaConfig)):
        return checked_config(config, "plan: config")
    raise BadArgumentError(f"plan: config must be {model_specs.WHAT}, an HF config dict or a LlamaConfig, got "
                           f"{type(config).__name__}")


def _ring_model(config, dtype):
    """The planner's view of the model, from the blocked-model interface."""
    with scratch_blocked_model(config._c_config(dtype)) as model:
        n = modelslib.dataflow_blocked_model_num_blocks(model)
        blocks = ffi.new("Dataflow_Ring_Block[]", n)
        ring_model = ffi.new("Dataflow_Ring_Model *")
        check(ringlib.dataflow_ring_model_from_blocked(model, blocks, n, ring_model))
    return ring_model, blocks


def _rate(value, what):
    if value is None:
        return 0.0
    rate = parse_bytes(value, what) if isinstance(value, str) else value
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
        raise BadArgumentError(f"plan: {what} must be a positive number of bytes per second, got {value!r}")
    return float(rate)


class Plan:
    """A plan (ring_plan.h): placement, memory maps and the predicted timeline."""

    def __init__(self, cdata):
        self._c = cdata

    @property
    def predicted_step_seconds(self):
        return self._c.step_seconds

    @property
    def tokens_per_second(self):
        return self._c.tokens_per_second

    @property
    def mfu(self):
        return self._c.mfu

    def __getattr__(self, field):  # the plain fields of Dataflow_Ring_Plan
        if field.startswith("_"):
            raise AttributeError(field)
        return getattr(self._c, field)

    @property
    def optimizer(self):
        return ffi.string(ringlib.dataflow_ring_optimizer_name(self._c.optimizer)).decode()

    @property
    def optimizer_state(self):
        """How AdamW's m and v are stored: "fp32", "bf16" or "8bit"."""
        return OPTIMIZER_STATES[self._c.optimizer_state]

    @property
    def save_levels(self):
        return [int(self._c.save_level[i]) for i in range(self._c.num_layers)]

    @property
    def activations_on_device(self):
        return [bool(self._c.activations_on_device[i]) for i in range(self._c.num_layers)]

    @property
    def device_memory(self):
        """{purpose: bytes} on the device (see ring_plan.h for which phase each is live in)."""
        return {ffi.string(ringlib.dataflow_ring_device_purpose_name(i)).decode(): self._c.device_bytes[i]
                for i in range(ringlib.DATAFLOW_RING_DEV_NUM)}

    @property
    def host_memory(self):
        return {ffi.string(ringlib.dataflow_ring_host_purpose_name(i)).decode(): self._c.host_bytes[i]
                for i in range(ringlib.DATAFLOW_RING_HOST_NUM)}

    @property
    def phases(self):
        """[{name, start, seconds, inbound, compute, outbound}] in seconds."""
        return [{"name": ffi.string(p.name).decode(), "start": p.start_seconds, "seconds": p.seconds,
                 "inbound": p.inbound_seconds, "compute": p.compute_seconds, "outbound": p.outbound_seconds}
                for p in self._c.phases[0:self._c.num_phases]]

    def describe(self):
        n = ringlib.dataflow_ring_plan_describe(self._c, ffi.NULL, 0)
        buf = ffi.new("char[]", n + 1)
        ringlib.dataflow_ring_plan_describe(self._c, buf, n + 1)
        return ffi.string(buf).decode()


OPTIMIZER_STATES = ("fp32", "bf16", "8bit")  # Dataflow_Optimizer_State, in its order


def optimizer_state_enum(optimizer_state, what="plan"):
    """The Dataflow_Optimizer_State of a name in OPTIMIZER_STATES."""
    if optimizer_state not in OPTIMIZER_STATES:
        raise BadArgumentError(f"{what}: optimizer_state must be one of {', '.join(OPTIMIZER_STATES)}, "
                               f"got {optimizer_state!r}")
    return OPTIMIZER_STATES.index(optimizer_state)


def _request(config, seq_len, device_memory, host_memory, tokens_per_step, profile, dtype, master_weights,
             h2d_bandwidth=None, d2h_bandwidth=None, host_adamw_bandwidth=None, optimizer_state="fp32"):
    """The checked Dataflow_Ring_Request and what it points at (kept alive with it)."""
    cfg = _llama_config(config)
    for name, value in (("seq_len", seq_len), ("tokens_per_step", tokens_per_step)):
        if (value is not None or name == "seq_len") and (isinstance(value, bool) or not isinstance(
                value, (int, np.integer)) or not 0 < value < 2**63):  # the planner checks its own range
            raise BadArgumentError(f"plan: {name} must be a positive integer, got {value!r:.40}")
    if not isinstance(master_weights, bool):
        raise BadArgumentError(f"plan: master_weights must be True or False, got {master_weights!r}")
    prof = profile if isinstance(profile, Profile) else Profile.named(profile)
    ring_model, blocks = _ring_model(cfg, dtype)
    req = ffi.new("Dataflow_Ring_Request *")
    req.model = ring_model
    req.seq_len = int(seq_len)
    req.tokens_per_step = int(seq_len if tokens_per_step is None else tokens_per_step)
    req.master_weights = int(master_weights)
    req.optimizer_state = optimizer_state_enum(optimizer_state)
    for name, value in (("device_memory", device_memory), ("host_memory", host_memory)):
        n = parse_bytes(value, name)
        if n >= 1 << 64:
            raise BadArgumentError(f"plan: {name} must be below 2^64 bytes, got {value!r}")
        setattr(req, name.replace("memory", "bytes"), n)
    req.h2d_bytes_per_sec = _rate(h2d_bandwidth, "h2d_bandwidth")
    req.d2h_bytes_per_sec = _rate(d2h_bandwidth, "d2h_bandwidth")
    req.host_adamw_bytes_per_sec = _rate(host_adamw_bandwidth, "host_adamw_bandwidth")
    req.profile = prof._c
    return req, (ring_model, blocks, prof)


def _planned(plan_fn, req, *args):
    out = ffi.new("Dataflow_Ring_Plan *")
    status = plan_fn(req, *args, out)
    if status != 0:
        err = error_for(status)
        err.min_device_bytes, err.min_host_bytes = out.min_device_bytes, out.min_host_bytes
        raise err
    return Plan(out)


def plan(config, seq_len, device_memory, host_memory, tokens_per_step=None, profile="h100-sxm", dtype="bf16",
         master_weights=False, h2d_bandwidth=None, d2h_bandwidth=None, host_adamw_bandwidth=None,
         optimizer_state="fp32"):
    """The fastest plan for training `config` (a dataflow.model_specs spec, an HF config dict or a LlamaConfig)
    on sequences of seq_len tokens, tokens_per_step per optimizer step (default one sequence),
    within device_memory and host_memory ("24GiB" or bytes). profile: a name or a Profile;
    bandwidths (bytes/s or "50GB") override the profile's link. optimizer_state: how AdamW's m
    and v are stored (OPTIMIZER_STATES; the planner counts their bytes). Raises OutOfMemoryError naming
    the least device and host memory a plan needs (also as .min_device_bytes, .min_host_bytes)."""
    req, keep = _request(config, seq_len, device_memory, host_memory, tokens_per_step, profile, dtype, master_weights,
                         h2d_bandwidth, d2h_bandwidth, host_adamw_bandwidth, optimizer_state)
    return _planned(ringlib.dataflow_ring_plan, req)


def resident_plan(config, seq_len, tokens_per_step, device_memory, save_level="all", profile="h100-sxm",
                  dtype="bf16", master_weights=False, optimizer_state="fp32"):
    """The all-resident plan (ring_plan.h, dataflow_ring_plan_resident): every block, its gradient,
    optimizer state and activations (at save_level, a SAVE_LEVELS name) on the device, a step one
    chunk of tokens_per_step tokens in sequences of at most seq_len. OutOfMemoryError (with
    .min_device_bytes, what it needs) when it does not fit device_memory."""
    from .models.llama import SAVE_LEVELS
    if save_level not in SAVE_LEVELS:
        raise BadArgumentError(f"plan: save_level must be one of {', '.join(SAVE_LEVELS)}, got {save_level!r}")
    req, keep = _request(config, seq_len, device_memory, 1 << 62, tokens_per_step, profile, dtype, master_weights,
                         optimizer_state=optimizer_state)
    return _planned(ringlib.dataflow_ring_plan_resident, req, SAVE_LEVELS[save_level])
