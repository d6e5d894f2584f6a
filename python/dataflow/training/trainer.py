"""Trainer: AdamW training of a Llama with at most one host sync per step, driven by the one
training engine, the ring executor (libdataflowring): all-resident training is the executor of
the all-resident plan over the model's own device blocks; larger than the device, a ring plan
(dataflow.training.ring_training); data-parallel (and ZeRO-1) inside the executor either way."""
from types import SimpleNamespace

import numpy as np

from .. import trace as traces
from .._ffi import modelslib
from ..errors import BadArgumentError, DataflowError, check
from .optimizer_state import MOMENTS, decode, encode, moment_bytes
from ..ring import OPTIMIZER_STATES, Plan, optimizer_state_enum
from .adamw_hyperparameters import adamw_hyperparameters, betas_pair
from ..models.llama import ADAM_M, ADAM_V, GRAD, MASTER


class Trainer:
    """AdamW training of a Llama, as torch.optim.AdamW + clip_grad_norm_(grad_clip) on the
    mean next-token loss. Hyperparameters are attributes, read at every step (set trainer.lr
    for a schedule). grad_clip 0 or None: no clipping. master_weights=True turns on the
    model's fp32 master weights (bf16 models; see Llama), None keeps the model's setting.

    One engine: every step runs in a ring executor (dataflow.training.executor). All-resident (the
    model on the device and its training fits): the executor of the all-resident plan
    (dataflow.ring.resident_plan) trains the model's own device blocks in place, every role on
    the step's `stream`; it is made at the first step for that batch's shape and again when a
    batch does not fit it or the stream changes (its scratch, activations and working set,
    is freed then; the model keeps its weights, so forward and generate run on the device
    between steps). .plan stays None.

    Host syncs: step() submits the batch (one inbound transfer), the forward/backward and the
    AdamW step, then waits ONCE to read the loss and the gradient norm together. accumulate()
    waits once for its chunk's loss; apply() does not wait: last_grad_norm waits when read.

    Data-parallel (comm: a dataflow.distributed.Communicator, rebound to the model's handle):
    each rank steps on its own batch; every block's gradient is summed over the ranks on
    comm_stream (default 1 when the handle has two streams) as soon as it is final, while the
    lower blocks differentiate (ring_executor.h); the loss is the mean over all ranks' labelled
    tokens, so every rank applies the same AdamW (clipped on the global norm) and returns the
    same loss. Two small host collectives per step (label count, loss) add two syncs; a step's
    batch must fit one executor call. shard_optimizer=True (ZeRO-1, with comm, all-resident):
    each rank keeps 1/N of the optimizer state (m, v, master weights), the gradients are
    reduce-scattered instead of all-reduced, each rank runs AdamW on its part and the weights
    are all-gathered; state_dict() and load_state_dict() gather and split the state (every rank
    must call them), so checkpoints are the same for any number of ranks.

    Larger than the device (host_memory, seq_len, batch_size, profile, plan): with host_memory
    given ("8GiB" or bytes) or a host-held model (Llama placement "host"; host_memory then
    defaults to what the host has available), the Trainer plans (dataflow.ring.plan) for batches
    of batch_size sequences of seq_len tokens (default: max_position_embeddings) under the
    handle's free device memory and host_memory, with profile's speeds (default: this machine's,
    measured once, dataflow.training.calibrate). When all-resident training fits, it trains
    all-resident as above and .plan is None; else .plan is the plan and the model's weights move
    into the executor, which streams them through device slots (the model is host-held from
    then on: state_dict, save_pretrained and checkpoints read the executor; generate runs on a
    CPU copy, see Llama). plan: a dataflow.ring.plan to use as given. A batch is split into
    chunks of whole sequences (dataflow.training.ring_training), a step syncs once per chunks_per_round x
    rounds_per_step chunks; the executor runs on streams 0..3 of the handle. OutOfMemoryError
    (the planner's, naming the least device and host memory) when no plan fits.

    Trace (trace=True, or start_trace() before the steps to trace; stop_trace() ends it):
    trace(path) writes what the executor ran as Chrome trace-event JSON for Perfetto
    (dataflow.trace, RingExecutor.trace): a track per role (compute, inbound, outbound,
    optimizer, and comm when data-parallel), device and host memory counters sampled after each
    step. Recording changes no result; it costs two host ops per span and ~64 bytes of host
    memory per span (about 4 L + 8 spans per step of L layers all-resident, more in the ring),
    so trace the steps you need.

    optimizer_state: how AdamW's m and v are stored, "fp32" (the model's own moments), "bf16"
    (updated in fp32, stored with stochastic rounding seeded by optimizer_seed: the same seed
    gives the same bits) or "8bit" (blockwise, Dettmers et al. 2021); the bf16 and 8-bit ones
    are the executor's own, in all-resident and ring training alike, and the planner counts
    their bytes. Not with shard_optimizer. state_dict() keeps them as trained (raw bytes per
    block, "optimizer_state" naming the precision); load_state_dict(..., convert=True) loads a
    state of another precision."""

    def __init__(self, model, lr=3e-4, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8, grad_clip=1.0,
                 master_weights=None, comm=None, comm_stream=None, shard_optimizer=False, host_memory=None,
                 seq_len=None, batch_size=1, profile=None, plan=None, trace=False, optimizer_state="fp32",
                 optimizer_seed=0):
        if model.config.quantization:
            raise BadArgumentError(f"Trainer: the model's linear weights are quantized "
                                   f"(int{model.config.quantization['bits']}), for inference only; train the "
                                   f"full-precision model and quantize it afterwards (dataflow quantize)")
        if model._in_ring():
            raise BadArgumentError("Trainer: another Trainer trains this model in its ring executor, which holds "
                                   "its weights and optimizer state; keep training with that Trainer, or save a "
                                   "checkpoint and restore it into a new model")
        self.model, self.lr, self.weight_decay, self.betas, self.eps = model, lr, weight_decay, betas_pair(betas), eps
        self.grad_clip = 0.0 if grad_clip is None else grad_clip
        optimizer_state_enum(optimizer_state, "Trainer")
        if isinstance(plan, Plan) and plan.optimizer_state != optimizer_state:
            raise BadArgumentError(f"Trainer: the plan stores the optimizer state as {plan.optimizer_state}, "
                                   f"but optimizer_state={optimizer_state!r}")
        if shard_optimizer and optimizer_state != "fp32":
            raise BadArgumentError(f"Trainer: shard_optimizer (ZeRO-1) shards fp32 optimizer state only, got "
                                   f"optimizer_state={optimizer_state!r}")
        self.optimizer_state, self.optimizer_seed, self._pending_state = optimizer_state, optimizer_seed, None
        adamw_hyperparameters(self)  # refused now, not at the first step
        if master_weights:
            model.enable_master_weights()
        elif master_weights is not None and model.master_weights:
            raise BadArgumentError("Trainer: master_weights=False, but the model already keeps master weights")
        self.step_count = 0
        self._norm, self._norm_pending = None, None  # last grad norm; "queued" / "waited": not yet read
        self._acc_loss, self._acc_labels = 0.0, 0
        self.comm, self.plan, self._ring, self._trace = None, None, None, None
        if shard_optimizer and comm is None:
            raise BadArgumentError("Trainer: shard_optimizer shards the optimizer state over the ranks of comm; "
                                   "pass comm=df.distributed.init()")
        self.shard_optimizer = bool(shard_optimizer)
        self._resident = True  # all-resident: the executor of an all-resident plan, made per batch shape
        if plan is not None or host_memory is not None or model.placement == "host":
            if self.shard_optimizer:
                raise BadArgumentError("Trainer: shard_optimizer (ZeRO-1) trains all-resident models only; drop "
                                       "host_memory and plan, and place the model on the device")
            from .ring_training import RingTraining, choose_plan
            self.plan = plan if plan is not None else choose_plan(model, host_memory, seq_len, batch_size, profile,
                                                                  optimizer_state)
            if self.plan is not None:
                self._ring, self._resident = RingTraining(model, self.plan), False
        self.comm_stream = None
        if comm is not None:
            self.comm = comm.on(model.handle)
            self.comm_stream = comm_stream if comm_stream is not None else 1 if model.handle.num_streams > 1 else 0
            if self.shard_optimizer:  # the model lays its optimizer state out over the ranks
                model._set_grad_comm(self.comm)
            if self._ring is not None:
                self._ring.executor.set_comm(self.comm, self.comm_stream)
        self._shard(True)
        if trace:
            self.start_trace()

    def start_trace(self):
        """Waits for the queued work, drops any earlier recording and records from now on."""
        if self._trace is None:
            self._trace = traces.Trace()
        if self._ring is not None:
            self._ring.executor.start_trace(self._trace)
        else:  # all-resident before the first step: no executor yet, nor its host arrays
            self._trace.start()
            self._trace.sample(self.model.handle, 0)

    def stop_trace(self):
        """Stops recording; trace(path) still writes what was recorded."""
        if self._trace is not None:
            self._trace.stop()

    def _recorded(self):
        if self._ring is None or self._trace is None:
            raise DataflowError("trace: nothing recorded; create the Trainer with trace=True or call "
                                "start_trace() before the steps to trace")
        return self._ring.executor

    def trace_events(self):
        """(spans, memory samples) recorded since start_trace, as dataflow.trace.Trace.read gives
        them: the executor's, streams named by role (compute, inbound, outbound, optimizer, comm)."""
        return self._recorded().trace_events()

    def trace(self, path):
        """Writes what was recorded since start_trace to `path` as Chrome trace-event JSON (opens
        in Perfetto); returns the dict."""
        return self._recorded().trace(path)

    def _shard(self, shard):
        """The optimizer state sharded over the ranks, or gathered whole (a collective)."""
        if self.shard_optimizer:
            for executor in list(self.model._adopters):  # the state they adopted is about to move
                executor.close()
            self._ring = None  # the next step adopts again
            self.model._on(0)
            check(modelslib.dataflow_llama_shard_optimizer(self.model._m, 0, int(shard)))
            self.model._optimizer_sharded = shard

    @property
    def last_grad_norm(self):
        """The pre-clip global gradient norm of the last optimizer step (None before one)."""
        self._wait_norm()
        return self._norm

    def _wait_norm(self):
        """Waits for the executor once, if not yet, and reads the last optimizer step's norm."""
        if self._norm_pending:
            if self._norm_pending == "queued":
                self._ring.executor.wait()
            self._norm, self._norm_pending = self._ring.executor.grad_norm(), None

    def _adamw(self, hyperparameters=None):
        """Submits the AdamW step (hyperparameters: adamw_hyperparameters, checked before the
        step began) and the read-back of its gradient norm; the step counts once it is queued."""
        params, grad_clip = hyperparameters or adamw_hyperparameters(self)
        self._ring.executor.apply(params, grad_clip, self.step_count + 1)
        self.step_count += 1
        self._norm_pending = "queued"
        if self._resident:
            self.model._stream = self._ring.stream  # the model's next work waits for the update
        else:
            self.model._weights_changed()

    def step(self, tokens, labels=None, documents=None, stream=0):
        """One optimizer step on one batch: tokens [B, T] or [T], or a list of 1-D documents;
        documents: lengths packing a 1-D tokens array, or a list of 1-D arrays (tokens=None).
        labels: HF-style (default: the tokens; next-token within each document). Returns the
        mean loss before the step."""
        if self._acc_labels:
            raise BadArgumentError("step: gradients from accumulate() are pending; call apply() first")
        hyperparameters = adamw_hyperparameters(self)
        if self._resident:
            self._for_batch(tokens, labels, documents, stream)
        chunks = self._ring.chunks(tokens, labels, documents, "step")
        num_labels = sum(c.num_labels for c in chunks)
        if self.comm is not None:
            if len(chunks) > self._ring.max_chunks:
                raise BadArgumentError(f"step: data-parallel, a step's batch must fit the plan's "
                                       f"{self._ring.max_chunks} chunks of {self._ring.plan.chunk_tokens} tokens "
                                       f"(one executor call), got {len(chunks)}; plan for the batch "
                                       f"(Trainer(seq_len=..., batch_size=...))")
            num_labels = int(self.comm.sum_host([num_labels], stream)[0])
        if num_labels == 0:
            raise BadArgumentError("step: no labelled tokens (every target is -100)")
        losses = self._ring.run(chunks, False, 1.0 / num_labels, lambda: self._adamw(hyperparameters))
        self._norm_pending = "waited"  # run() waited after the update: the norm is on the host
        self._wait_norm()
        if self.comm is None:
            return self.model._batch_loss(losses, 1.0 / num_labels)
        return float(self.comm.sum_host([self.model._batch_loss(losses, 1.0)], stream)[0] / num_labels)

    def _for_batch(self, tokens, labels, documents, stream):
        """All-resident: the executor of the all-resident plan that takes this batch on `stream`
        (the one before when it does; a new one keeps recording the trace)."""
        from .ring_training import resident_training
        self.model._m  # ClosedError for a closed model, before its memory is adopted
        ring = resident_training(self.model, (tokens, labels, documents), stream, self._ring, self.optimizer_state)
        if ring is not self._ring:
            self._ring = ring
            self._write_pending_state()
            self.model._on(stream)
            if self.comm is not None:
                ring.executor.set_comm(self.comm, self.comm_stream, self.shard_optimizer)
            if self._trace is not None and self._trace.recording:
                ring.executor.start_trace(self._trace, keep=True)

    def accumulate(self, tokens, labels=None, documents=None, stream=0):
        """Adds one chunk's gradients (of its summed loss; apply() divides by the labelled
        tokens of all chunks, so k chunks then apply() equal one step on all of them).
        Returns this chunk's mean loss."""
        if self.comm is not None:
            raise BadArgumentError("accumulate: not supported with comm (data-parallel); use step()")
        first = self._acc_labels == 0
        if self._resident:
            self._for_batch(tokens, labels, documents, stream)
        chunks = self._ring.chunks(tokens, labels, documents, "accumulate")
        batch_sum = self.model._batch_loss(self._ring.run(chunks, not first, 1.0), 1.0)
        n = sum(c.num_labels for c in chunks)
        self._acc_loss += batch_sum
        self._acc_labels += n
        return batch_sum / n if n else float("nan")

    def apply(self, stream=0):
        """The optimizer step for the accumulated chunks; returns their mean loss. It runs on the
        streams of the executor that ran them (stream: kept for callers; the model's later work
        on any stream waits for it)."""
        if self._acc_labels == 0:
            raise BadArgumentError("apply: nothing accumulated (or no labelled tokens)")
        hyperparameters = adamw_hyperparameters(self)
        self._ring.executor.scale_grads(1.0 / self._acc_labels)
        loss = self._acc_loss / self._acc_labels
        self._acc_loss, self._acc_labels = 0.0, 0
        self._adamw(hyperparameters)
        return loss

    def state_dict(self):
        """{"step": int, "exp_avg": {name: float32 numpy}, "exp_avg_sq": {...}, "hyperparameters": {...}}
        (m and v as torch.optim.AdamW names them; empty dicts before the first step), and
        "master": {name: float32 numpy} when the model keeps fp32 master weights."""
        self._shard(False)
        if self.optimizer_state == "fp32":
            m, v = self.model._read_kind(ADAM_M), self.model._read_kind(ADAM_V)
        else:  # as trained: raw bytes per block (empty before the first step)
            m, v = (self._pending_state or {}).get(ADAM_M), (self._pending_state or {}).get(ADAM_V)
            if self._ring is not None and self.step_count:
                x = self._ring.executor
                m, v = ({f"block{b}": x.read(b, k) for b in range(x.num_blocks)} for k in (ADAM_M, ADAM_V))
        state = {"step": self.step_count, "exp_avg": m or {}, "exp_avg_sq": v or {},
                 "hyperparameters": {"lr": self.lr, "weight_decay": self.weight_decay, "betas": list(self.betas),
                                     "eps": self.eps, "grad_clip": self.grad_clip}}
        masters = self.model._read_kind(MASTER)
        if masters is not None:
            state["master"] = masters
        if self.optimizer_state != "fp32":
            state["optimizer_state"] = self.optimizer_state
        self._shard(True)
        return state

    def _moment_blocks(self, state, stored):
        """{ADAM_M, ADAM_V: [float32 values per block]} of a state_dict's moments stored as
        `stored` (fp32: by tensor name; bf16, 8bit: raw bytes per block), checked."""
        layout, out = self.model.layout, {}
        numels = [row[GRAD] // 4 for row in layout.bytes]
        for kind, moment in zip((ADAM_M, ADAM_V), MOMENTS):
            if stored == "fp32":
                named = self._checked_arrays(moment, state.get(moment, {}))
                blocks = [np.zeros(n, np.float32) for n in numels]
                for name, shape, b, offset in layout.tensors:
                    blocks[b][offset:offset + named[name].size] = named[name].reshape(-1)
            else:
                raw = state.get(moment)
                keys = [f"block{b}" for b in range(len(numels))]
                if not isinstance(raw, dict) or sorted(raw) != sorted(keys):
                    raise BadArgumentError(f"Trainer.load_state_dict: {moment}: expected raw {stored} blocks "
                                           f"{keys[0]}..{keys[-1]}")
                for k, n in zip(keys, numels):
                    if np.asarray(raw[k]).nbytes != moment_bytes(stored, n):
                        raise BadArgumentError(f"Trainer.load_state_dict: {moment} {k}: expected "
                                               f"{moment_bytes(stored, n)} bytes of {stored} state, got "
                                               f"{np.asarray(raw[k]).nbytes}")
                blocks = [decode(stored, raw[k], n, moment) for k, n in zip(keys, numels)]
            out[kind] = blocks
        return out

    def _write_pending_state(self):
        """Moves raw bf16 / 8-bit moments loaded before the executor existed into it."""
        if self._pending_state and self._ring is not None:
            for kind, blocks in self._pending_state.items():
                for b in range(len(blocks)):
                    self._ring.executor.write(b, kind, blocks[f"block{b}"])
            self._pending_state = None

    def _checked_arrays(self, key, values):
        """{name: float32 array} of one kind of state, checked against the model's names and shapes."""
        shapes = self.model.shapes()
        if not isinstance(values, dict):
            raise BadArgumentError(f"Trainer.load_state_dict: {key}: expected a dict of arrays, got "
                                   f"{type(values).__name__}")
        missing = [n for n in shapes if n not in values]
        unexpected = [n for n in values if n not in shapes]
        if missing or unexpected:
            raise BadArgumentError(f"Trainer.load_state_dict: {key}: missing {missing[:5]}, unexpected {unexpected[:5]}")
        checked = {}
        for n, shape in shapes.items():
            try:
                with np.errstate(over="raise"):
                    checked[n] = np.asarray(values[n], dtype=np.float32)
            except (TypeError, ValueError, OverflowError, FloatingPointError) as e:
                raise BadArgumentError(f"Trainer.load_state_dict: {key} {n}: expected float32 numbers, got "
                                       f"{type(values[n]).__name__} ({e})") from None
            if checked[n].shape != shape:
                raise BadArgumentError(f"Trainer.load_state_dict: {key} {n}: expected shape {shape}, "
                                       f"got {checked[n].shape}")
        return checked

    def _checked_state(self, state, moments=True):
        """(step, {kind: arrays}, hyperparameters or None) of a state_dict, every field checked
        before anything is written: a refused load changes nothing."""
        if not isinstance(state, dict):
            raise BadArgumentError(f"Trainer.load_state_dict: expected a dict, got {type(state).__name__}")
        step = state.get("step")
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
            raise BadArgumentError(f"Trainer.load_state_dict: step must be an integer >= 0, got {step!r:.60}")
        kinds = {}
        if "master" in state:
            if not self.model.master_weights:
                raise BadArgumentError("Trainer.load_state_dict: the state has fp32 master weights, but the model "
                                       "keeps none (Trainer(..., master_weights=True) or Llama(..., "
                                       "master_weights=True))")
            kinds[MASTER] = self._checked_arrays("master", state["master"])
        if step > 0 and moments:
            kinds[ADAM_M] = self._checked_arrays("exp_avg", state.get("exp_avg", {}))
            kinds[ADAM_V] = self._checked_arrays("exp_avg_sq", state.get("exp_avg_sq", {}))
        hp = state.get("hyperparameters")
        if hp:
            fields = ("lr", "weight_decay", "betas", "eps", "grad_clip")
            if not isinstance(hp, dict) or any(f not in hp for f in fields):
                raise BadArgumentError(f"Trainer.load_state_dict: hyperparameters: expected an object with "
                                       f"{', '.join(fields)}, got {hp!r:.100}")
            hp = {f: hp[f] for f in fields}
            adamw_hyperparameters(SimpleNamespace(**hp))
        return int(step), kinds, hp

    def load_state_dict(self, state, convert=False):
        """Restores step, m and v, master weights (and hyperparameters when present) from
        state_dict(). Master weights in the state need a model that keeps them; a model that
        keeps them without any in the state keeps the copies of its current weights. m and v
        stored in another precision than this Trainer's optimizer_state load only with
        convert=True (decoded to fp32, then rounded as the kernels store them).
        BadArgumentError naming the field for a malformed state, before anything changes."""
        if not isinstance(state, dict):
            raise BadArgumentError(f"Trainer.load_state_dict: expected a dict, got {type(state).__name__}")
        stored = state.get("optimizer_state", "fp32")
        if stored not in OPTIMIZER_STATES:
            raise BadArgumentError(f"Trainer.load_state_dict: optimizer_state must be one of "
                                   f"{', '.join(OPTIMIZER_STATES)}, got {stored!r:.40}")
        if stored != self.optimizer_state and state.get("step") and not convert:
            raise BadArgumentError(f"Trainer.load_state_dict: the optimizer state was trained as {stored}, this "
                                   f"Trainer keeps {self.optimizer_state}; pass convert=True to convert it")
        lean = stored != "fp32" or self.optimizer_state != "fp32"
        moments = self._moment_blocks(state, stored) if lean and state.get("step") else None
        step, kinds, hp = self._checked_state(dict(state, exp_avg=None, exp_avg_sq=None) if lean else state,
                                              moments=not lean)
        if moments and self.optimizer_state == "fp32":  # back to named arrays for the model
            for kind, blocks in moments.items():
                kinds[kind] = {name: blocks[b][offset:offset + int(np.prod(shape))].reshape(shape)
                               for name, shape, b, offset in self.model.layout.tensors}
        elif moments and stored == self.optimizer_state:  # as trained (8-bit does not survive a re-encode)
            self._pending_state = {kind: {key: np.ascontiguousarray(raw).view(np.uint8).reshape(-1).copy()
                                          for key, raw in state[moment].items()}
                                   for kind, moment in zip((ADAM_M, ADAM_V), MOMENTS)}
        elif moments:
            self._pending_state = {kind: {f"block{b}": encode(self.optimizer_state, values, moment)
                                          for b, values in enumerate(blocks)}
                                   for (kind, blocks), moment in zip(moments.items(), MOMENTS)}
        self._shard(False)
        if step > 0 and self._ring is None and self.optimizer_state == "fp32":
            self.model._on(0)
            check(modelslib.dataflow_llama_alloc_optimizer_state(self.model._m, 0))
        for kind, arrays in kinds.items():  # MASTER first: writing it resets nothing else
            self.model._write_kind(kind, arrays.__getitem__)
        if hp:
            self.lr, self.weight_decay, self.betas = hp["lr"], hp["weight_decay"], betas_pair(hp["betas"])
            self.eps, self.grad_clip = hp["eps"], hp["grad_clip"]
        self.step_count = step
        self._write_pending_state()
        self._shard(True)
