"""Trainer: AdamW training of a Llama with at most one host sync per step, driven by the one
training engine, the ring executor (libdataflowring): all-resident training is the executor of
the all-resident plan over the model's own device blocks; larger than the device, a ring plan
(dataflow.training.ring_training); data-parallel (and ZeRO-1) inside the executor either way."""
from .. import trace as traces
from .._ffi import modelslib
from ..errors import BadArgumentError, DataflowError, check
from ..ring import Plan, host_gradients_enum, optimizer_state_enum
from . import trainer_state
from .adamw_hyperparameters import adamw_hyperparameters, betas_pair
from .ring_training import ResidentTraining, RingTraining, choose_plan


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
    state of another precision.

    host_gradients: how the ring keeps gradients on the host between rounds, "fp32" or "bf16"
    (accumulated in fp32 on the device within a round, rounded to nearest even when sent home:
    half the host memory and link traffic, a rounding per round). All-resident training keeps
    every gradient on the device: there it changes nothing."""

    def __init__(self, model, lr=3e-4, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8, grad_clip=1.0,
                 master_weights=None, comm=None, comm_stream=None, shard_optimizer=False, host_memory=None,
                 seq_len=None, batch_size=1, profile=None, plan=None, trace=False, optimizer_state="fp32",
                 optimizer_seed=0, host_gradients="fp32"):
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
        host_gradients_enum(host_gradients, "Trainer")
        if isinstance(plan, Plan) and plan.host_gradients != host_gradients:
            raise BadArgumentError(f"Trainer: the plan keeps host gradients in {plan.host_gradients}, "
                                   f"but host_gradients={host_gradients!r}")
        if shard_optimizer and comm is None:
            raise BadArgumentError("Trainer: shard_optimizer shards the optimizer state over the ranks of comm; "
                                   "pass comm=df.distributed.init()")
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
        self.shard_optimizer, self._ring, self._trace = bool(shard_optimizer), None, None
        self.plan = plan
        if plan is None and (host_memory is not None or model.placement == "host"):
            self.plan = choose_plan(model, host_memory, seq_len, batch_size, profile, optimizer_state,
                                    host_gradients)
        if self.plan is not None and self.shard_optimizer:
            raise BadArgumentError("Trainer: shard_optimizer (ZeRO-1) trains all-resident models only; drop "
                                   "host_memory and plan, and place the model on the device")
        self._engine = ResidentTraining(model, optimizer_state) if self.plan is None else RingTraining(model, self.plan)
        self.comm = None if comm is None else comm.on(model.handle)
        self.comm_stream = None if comm is None else comm_stream if comm_stream is not None else int(
            model.handle.num_streams > 1)
        if self.shard_optimizer:  # the model lays its optimizer state out over the ranks
            model._set_grad_comm(self.comm)
        if self._engine.current is not None:
            self._use(self._engine.current)
        self._shard(True)
        if trace:
            self.start_trace()

    def _training(self, batch, stream):
        """The RingTraining that runs this batch ((tokens, labels, documents)) on `stream`."""
        ring = self._engine.for_batch(batch, stream)
        if ring is not self._ring:
            self._use(ring)
        return ring

    def _use(self, ring):
        """Trains with `ring` from now on: the state loaded before it existed, the ranks, the trace."""
        self._ring = ring
        trainer_state.write_pending(self)
        if self.comm is not None:
            ring.executor.set_comm(self.comm, self.comm_stream, self.shard_optimizer)
        if self._trace is not None and self._trace.recording:
            ring.executor.start_trace(self._trace, keep=True)

    def start_trace(self):
        """Waits for the queued work, drops any earlier recording and records from now on."""
        if self._trace is None:
            self._trace = traces.Trace()
        if self._ring is not None:
            self._ring.executor.start_trace(self._trace)
        else:  # before the first step of all-resident training: no executor yet, nor its host arrays
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
        if self._norm_pending:  # waits for the executor once, if not yet
            if self._norm_pending == "queued":
                self._ring.executor.wait()
            self._norm, self._norm_pending = self._ring.executor.grad_norm(), None
        return self._norm

    def _adamw(self, hyperparameters=None):
        """Submits the AdamW step (hyperparameters: adamw_hyperparameters, checked before the
        step began) and the read-back of its gradient norm; the step counts once it is queued."""
        params, grad_clip = hyperparameters or adamw_hyperparameters(self)
        self._ring.executor.apply(params, grad_clip, self.step_count + 1)
        self.step_count += 1
        self._norm_pending = "queued"
        self._ring.updated(self.model)

    def _sum_over_ranks(self, value, stream):
        return value if self.comm is None else self.comm.sum_host([value], stream)[0]

    def step(self, tokens, labels=None, documents=None, stream=0):
        """One optimizer step on one batch: tokens [B, T] or [T], or a list of 1-D documents;
        documents: lengths packing a 1-D tokens array, or a list of 1-D arrays (tokens=None).
        labels: HF-style (default: the tokens; next-token within each document). Returns the
        mean loss before the step (over every rank's labelled tokens, data-parallel)."""
        if self._acc_labels:
            raise BadArgumentError("step: gradients from accumulate() are pending; call apply() first")
        hyperparameters = adamw_hyperparameters(self)
        ring = self._training((tokens, labels, documents), stream)
        chunks = ring.chunks(tokens, labels, documents, "step")
        if self.comm is not None and len(chunks) > ring.max_chunks:
            raise BadArgumentError(f"step: data-parallel, a step's batch must fit the plan's {ring.max_chunks} "
                                   f"chunks of {ring.plan.chunk_tokens} tokens (one executor call), got "
                                   f"{len(chunks)}; plan for the batch (Trainer(seq_len=..., batch_size=...))")
        num_labels = int(self._sum_over_ranks(sum(c.num_labels for c in chunks), stream))
        if num_labels == 0:
            raise BadArgumentError("step: no labelled tokens (every target is -100)")
        losses = ring.run(chunks, False, 1.0 / num_labels, lambda: self._adamw(hyperparameters))
        self._norm_pending = "waited"  # run() waited after the update: the norm is on the host
        self.last_grad_norm
        if self.comm is None:  # the summed loss scaled in C, as the golden trajectory recorded it
            return self.model._batch_loss(losses, 1.0 / num_labels)
        return float(self.comm.sum_host([self.model._batch_loss(losses, 1.0)], stream)[0] / num_labels)

    def accumulate(self, tokens, labels=None, documents=None, stream=0):
        """Adds one chunk's gradients (of its summed loss; apply() divides by the labelled
        tokens of all chunks, so k chunks then apply() equal one step on all of them).
        Returns this chunk's mean loss."""
        if self.comm is not None:
            raise BadArgumentError("accumulate: not supported with comm (data-parallel); use step()")
        first = self._acc_labels == 0
        ring = self._training((tokens, labels, documents), stream)
        chunks = ring.chunks(tokens, labels, documents, "accumulate")
        batch_sum = self.model._batch_loss(ring.run(chunks, not first, 1.0), 1.0)
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
        "master": {name: float32 numpy} when the model keeps fp32 master weights; bf16 and 8-bit
        moments as trained (raw bytes per block, "optimizer_state" naming the precision)."""
        return trainer_state.state_dict(self)

    def load_state_dict(self, state, convert=False):
        """Restores step, m and v, master weights (and hyperparameters when present) from
        state_dict(). Master weights in the state need a model that keeps them; a model that
        keeps them without any in the state keeps the copies of its current weights. m and v
        stored in another precision than this Trainer's optimizer_state load only with
        convert=True (decoded to fp32, then rounded as the kernels store them).
        BadArgumentError naming the field for a malformed state, before anything changes."""
        trainer_state.load_state_dict(self, state, convert)
