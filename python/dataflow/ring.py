"""The ring planner (libdataflowring/include/dataflow/ring_plan.h) from Python.

    plan = df.ring.plan("llama3-8b", seq_len=8192, tokens_per_step=65536, device_memory="24GiB",
                        host_memory="128GiB", profile="h100-sxm", dtype="bf16")
    print(plan.describe()); plan.predicted_step_seconds

Profiles: the built-in named ones (`profile_names()`), or `dataflow.training.calibrate(handle)`: the
handle's own speeds, measured on its ops (a matmul, an attention, a memory-bound add, transfers
both ways). A pure function of its arguments: nothing here runs a model.
"""
import numpy as np


from .models import presets as model_specs
from .c_strings import c_bytes
from ._ffi import ffi, modelslib, ringlib
from .errors import BadArgumentError, check, error_for
from .handle import parse_bytes
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


def model_config(config):
    if isinstance(config, str):
        config = model_specs.resolve(config, "plan: config")[1]
    if isinstance(config, (dict, LlamaConfig)):
        return checked_config(config, "plan: config")
    raise BadArgumentError(f"plan: config must be {model_specs.WHAT}, an HF config dict or a LlamaConfig, got "
                           f"{type(config).__name__}")


def blocked_ring_model(config, dtype):
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
    def host_gradients(self):
        """How gradients held on the host between rounds are stored: "fp32" or "bf16"."""
        return HOST_GRADIENTS[self._c.host_gradients]

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
    def disk_memory(self):
        """{host purpose: bytes} kept in files under the disk directory (the disk tier)."""
        return {ffi.string(ringlib.dataflow_ring_host_purpose_name(i)).decode(): self._c.disk_bytes[i]
                for i in range(ringlib.DATAFLOW_RING_HOST_NUM) if self._c.disk_bytes[i]}

    @property
    def disk(self):
        """The disk tier: capacity, bytes used by purpose, rate, and a step's reads and writes."""
        return {"capacity": self._c.disk_capacity, "used": self._c.disk_total_bytes,
                "bytes_per_second": self._c.disk_bytes_per_sec, "memory": self.disk_memory,
                "read_per_step": self._c.disk_read_bytes, "written_per_step": self._c.disk_write_bytes}

    def without_disk(self):
        """This plan with what it keeps on disk in host memory instead (its host capacity grown
        by those bytes): the host tier's run of the same shape, e.g. to compare the tiers."""
        c = ffi.new("Dataflow_Ring_Plan *", self._c[0])
        c.host_capacity += c.disk_total_bytes
        for i in range(ringlib.DATAFLOW_RING_HOST_NUM):
            c.host_bytes[i] += c.disk_bytes[i]
            c.disk_bytes[i] = 0
        c.host_bytes[ringlib.DATAFLOW_RING_HOST_DISK_STAGING] = 0
        c.host_total_bytes = sum(c.host_bytes)
        c.disk_total_bytes = c.disk_capacity = c.disk_read_bytes = c.disk_write_bytes = 0
        return Plan(c)

    @property
    def phases(self):
        """[{name, start, seconds, inbound, compute, outbound, disk}] in seconds."""
        return [{"name": ffi.string(p.name).decode(), "start": p.start_seconds, "seconds": p.seconds,
                 "inbound": p.inbound_seconds, "compute": p.compute_seconds, "outbound": p.outbound_seconds,
                 "disk": p.disk_seconds}
                for p in self._c.phases[0:self._c.num_phases]]

    def describe(self):
        n = ringlib.dataflow_ring_plan_describe(self._c, ffi.NULL, 0)
        buf = ffi.new("char[]", n + 1)
        ringlib.dataflow_ring_plan_describe(self._c, buf, n + 1)
        return ffi.string(buf).decode()


OPTIMIZER_STATES = ("fp32", "bf16", "8bit")  # Dataflow_Optimizer_State, in its order
DISK_KINDS = ("optimizer state", "weights", "gradients")  # DATAFLOW_RING_DISK_* bits, in the order the disk takes them
HOST_GRADIENTS = ("fp32", "bf16")  # Dataflow_Host_Gradients, in its order


def optimizer_state_enum(optimizer_state, what="plan"):
    """The Dataflow_Optimizer_State of a name in OPTIMIZER_STATES."""
    if optimizer_state not in OPTIMIZER_STATES:
        raise BadArgumentError(f"{what}: optimizer_state must be one of {', '.join(OPTIMIZER_STATES)}, "
                               f"got {optimizer_state!r}")
    return OPTIMIZER_STATES.index(optimizer_state)


def host_gradients_enum(host_gradients, what="plan"):
    """Dataflow_Host_Gradients of a HOST_GRADIENTS name."""
    if host_gradients not in HOST_GRADIENTS:
        raise BadArgumentError(f"{what}: host_gradients must be one of {', '.join(HOST_GRADIENTS)}, "
                               f"got {host_gradients!r}")
    return HOST_GRADIENTS.index(host_gradients)


def _request(config, seq_len, device_memory, host_memory, tokens_per_step, profile, dtype, master_weights,
             h2d_bandwidth=None, d2h_bandwidth=None, host_adamw_bandwidth=None, optimizer_state="fp32",
             disk_memory=None, disk_bandwidth=None, disk_kinds=None, host_gradients="fp32", shard_ranks=1):
    """The checked Dataflow_Ring_Request and what it points at (kept alive with it)."""
    cfg = model_config(config)
    for name, value in (("seq_len", seq_len), ("tokens_per_step", tokens_per_step)):
        if (value is not None or name == "seq_len") and (isinstance(value, bool) or not isinstance(
                value, (int, np.integer)) or not 0 < value < 2**63):  # the planner checks its own range
            raise BadArgumentError(f"plan: {name} must be a positive integer, got {value!r:.40}")
    if isinstance(shard_ranks, bool) or not isinstance(shard_ranks, (int, np.integer)) or not 0 < shard_ranks < 2**31:
        raise BadArgumentError(f"plan: shard_ranks must be a positive integer, got {shard_ranks!r:.40}")
    if not isinstance(master_weights, bool):
        raise BadArgumentError(f"plan: master_weights must be True or False, got {master_weights!r}")
    prof = profile if isinstance(profile, Profile) else Profile.named(profile)
    ring_model, blocks = blocked_ring_model(cfg, dtype)
    req = ffi.new("Dataflow_Ring_Request *")
    req.model = ring_model
    req.seq_len = int(seq_len)
    req.tokens_per_step = int(seq_len if tokens_per_step is None else tokens_per_step)
    req.master_weights = int(master_weights)
    req.optimizer_state = optimizer_state_enum(optimizer_state)
    req.host_gradients = host_gradients_enum(host_gradients)
    req.shard_ranks = int(shard_ranks)
    for name, value in (("device_memory", device_memory), ("host_memory", host_memory), ("disk_memory", disk_memory)):
        if value is not None or name != "disk_memory":  # no disk tier: 0 bytes
            setattr(req, name.replace("memory", "bytes"), parse_bytes(value, name))
    req.h2d_bytes_per_sec = _rate(h2d_bandwidth, "h2d_bandwidth")
    req.d2h_bytes_per_sec = _rate(d2h_bandwidth, "d2h_bandwidth")
    req.host_adamw_bytes_per_sec = _rate(host_adamw_bandwidth, "host_adamw_bandwidth")
    req.disk_bytes_per_sec = _rate(disk_bandwidth, "disk_bandwidth")
    if disk_kinds is not None:
        if not disk_kinds or any(k not in DISK_KINDS for k in disk_kinds):
            raise BadArgumentError(f"plan: disk_kinds must name some of {', '.join(DISK_KINDS)}, got {disk_kinds!r}")
        req.disk_kinds = sum(1 << DISK_KINDS.index(k) for k in set(disk_kinds))
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
         optimizer_state="fp32", disk_memory=None, disk_bandwidth=None, disk_kinds=None, host_gradients="fp32",
         shard_ranks=1):
    """The fastest plan for training `config` (a dataflow.models.presets spec, an HF config dict or a LlamaConfig)
    on sequences of seq_len tokens, tokens_per_step per optimizer step (default one sequence),
    within device_memory and host_memory ("24GiB" or bytes). profile: a name or a Profile;
    bandwidths (bytes/s or "50GB") override the profile's link. optimizer_state: how AdamW's m
    and v are stored (OPTIMIZER_STATES; the planner counts their bytes); host_gradients: how
    gradients kept on the host between rounds are stored (HOST_GRADIENTS: bf16 halves their
    bytes and transfers, rounding each round's partial sum). disk_memory: a disk tier
    ("1TiB"; None: none) taking optimizer state, then weights, then gradients when host memory
    runs out, at disk_bandwidth bytes/s (None: DATAFLOW_RING_DISK_DEFAULT_BYTES_PER_SEC);
    disk_kinds: which of DISK_KINDS it may take (None: all; the executor runs "optimizer state"
    only). shard_ranks: ZeRO-1 over that many data-parallel ranks, each keeping 1/N of the fp32
    optimizer state (the planner counts one rank's). Raises OutOfMemoryError naming the least device and host memory a plan needs (also as
    .min_device_bytes, .min_host_bytes)."""
    req, keep = _request(config, seq_len, device_memory, host_memory, tokens_per_step, profile, dtype, master_weights,
                         h2d_bandwidth, d2h_bandwidth, host_adamw_bandwidth, optimizer_state, disk_memory,
                         disk_bandwidth, disk_kinds, host_gradients, shard_ranks)
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
