"""Trainer: AdamW training of a Llama with at most one host sync per step, driven by the one
training engine, the ring executor (libdataflowring), through dataflow.training.engine: the same
path for all-resident, ring, data-parallel and ZeRO-1 training."""
from ..errors import BadArgumentError
from ..ring import Plan, host_gradients_enum, optimizer_state_enum
from . import trainer_state
from .adamw_hyperparameters import adamw_hyperparameters, betas_pair
from .data_parallel import ranks_of
from .disk_tier import disk_tier
from .engine import Engine, refuse_untrainable


class Trainer:
    """AdamW training of a Llama, as torch.optim.AdamW + clip_grad_norm_(grad_clip) on the
    mean next-token loss. Hyperparameters are attributes, read at every step (set trainer.lr
    for a schedule). grad_clip 0 or None: no clipping. master_weights=True turns on the
    model's fp32 master weights (bf16 models; see Llama), None keeps the model's setting.

    One engine: every step runs in a ring executor (dataflow.training.engine). All-resident (the
    model on the device and its training fits): the executor of the all-resident plan trains the
    model's own device blocks in place on the step's `stream`, and .plan stays None.

    Host syncs: step() submits the batch (one inbound transfer), the forward/backward and the
    AdamW step, then waits ONCE, for the loss (in the ring the update may run on under the next
    step's forward). accumulate() waits once for its chunk's loss; apply() does not wait.
    Reading weights or state waits for the pending update first (Engine.wait_for_update).

    Data-parallel (comm, comm_stream; shard_optimizer=True: ZeRO-1, resident or ring): each rank
    steps on its own batch and returns the mean loss over every rank's labelled tokens; see
    dataflow.training.data_parallel.

    Larger than the device (host_memory, seq_len, batch_size, profile, plan): with host_memory
    given ("8GiB" or bytes) or a host-held model, the Trainer plans (dataflow.ring.plan) for
    batches of batch_size sequences of seq_len tokens; when all-resident training does not fit,
    .plan is the plan and the model's weights move into the executor; see
    dataflow.training.ring_training. OutOfMemoryError when no plan fits.

    Trace (trace=True, or start_trace() before the steps to trace; stop_trace() ends it): what
    the executor ran, a track per role, as Chrome trace-event JSON (see dataflow.training.engine).

    optimizer_state: how AdamW's m and v are stored, "fp32" (the model's own moments), "bf16"
    (updated in fp32, stored with stochastic rounding seeded by optimizer_seed: the same seed
    gives the same bits) or "8bit" (blockwise, Dettmers et al. 2021); the bf16 and 8-bit ones
    are the executor's own, and the planner counts their bytes. Not with shard_optimizer.
    state_dict() keeps them as trained; load_state_dict(..., convert=True) loads a state of
    another precision.

    host_gradients: how the ring keeps gradients on the host between rounds, "fp32" or "bf16"
    (accumulated in fp32 on the device within a round, rounded to nearest even when sent home:
    half the host memory and link traffic, a rounding per round). All-resident training keeps
    every gradient on the device: there it changes nothing.

    disk (a directory), disk_memory (default: its free space), disk_throttle (bytes/s): a disk
    tier the plan may use when host memory runs out (optimizer state first; the executor runs
    optimizer state there, dataflow.training.disk_tier); implies planning, as host_memory does."""

    def __init__(self, model, lr=3e-4, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8, grad_clip=1.0,
                 master_weights=None, comm=None, comm_stream=None, shard_optimizer=False, host_memory=None,
                 seq_len=None, batch_size=1, profile=None, plan=None, trace=False, optimizer_state="fp32",
                 optimizer_seed=0, disk=None, disk_memory=None, disk_throttle=None, host_gradients="fp32"):
        refuse_untrainable(model)
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
        self.optimizer_state, self.optimizer_seed, self._pending_state = optimizer_state, optimizer_seed, None
        self._ranks = ranks_of(model, comm, comm_stream, shard_optimizer, optimizer_state)
        adamw_hyperparameters(self)  # refused now, not at the first step
        if master_weights:
            model.enable_master_weights()
        elif master_weights is not None and model.master_weights:
            raise BadArgumentError("Trainer: master_weights=False, but the model already keeps master weights")
        self.step_count, self._acc_loss, self._acc_labels = 0, 0.0, 0
        self._engine = Engine(model, plan, (host_memory, seq_len, batch_size, profile), optimizer_state, self._ranks,
                              lambda executor: trainer_state.write_pending(self, executor),
                              disk_tier(disk, disk_memory, disk_throttle), host_gradients)
        self.plan = self._engine.plan
        self._ranks.shard(model, self._engine, True)
        if trace:
            self.start_trace()

    def start_trace(self):
        """Waits for the queued work, drops any earlier recording and records from now on."""
        self._engine.start_trace()

    def stop_trace(self):
        """Stops recording; trace(path) still writes what was recorded."""
        self._engine.stop_trace()

    def trace_events(self):
        """(spans, memory samples) recorded since start_trace, as dataflow.trace.Trace.read gives
        them: the executor's, streams named by role (compute, inbound, outbound, optimizer, comm)."""
        return self._engine.recorded().trace_events()

    def trace(self, path):
        """Writes what was recorded since start_trace to `path` as Chrome trace-event JSON (opens
        in Perfetto); returns the dict."""
        return self._engine.recorded().trace(path)

    @property
    def last_grad_norm(self):
        """The pre-clip global gradient norm of the last optimizer step (None before one)."""
        return self._engine.grad_norm()

    def _adamw(self, hyperparameters):
        """Submits the AdamW step (hyperparameters: adamw_hyperparameters, checked before the
        step began); the step counts once it is queued."""
        self._engine.apply(*hyperparameters, self.step_count + 1)
        self.step_count += 1

    def step(self, tokens, labels=None, documents=None, stream=0):
        """One optimizer step on one batch: tokens [B, T] or [T], or a list of 1-D documents;
        documents: lengths packing a 1-D tokens array, or a list of 1-D arrays (tokens=None).
        labels: HF-style (default: the tokens; next-token within each document). Returns the
        mean loss before the step (over every rank's labelled tokens, data-parallel)."""
        if self._acc_labels:
            raise BadArgumentError("step: gradients from accumulate() are pending; call apply() first")
        hyperparameters = adamw_hyperparameters(self)
        ring = self._engine.for_batch((tokens, labels, documents), stream)
        chunks = ring.chunks(tokens, labels, documents, "step")
        num_labels = self._ranks.num_labels(ring, chunks, stream)
        if num_labels == 0:
            raise BadArgumentError("step: no labelled tokens (every target is -100)")
        losses = ring.run(chunks, False, 1.0 / num_labels, lambda: self._adamw(hyperparameters))
        self._engine.loss_known()
        return self._ranks.mean_loss(self.model, losses, num_labels, stream) + ring.aux_loss

    def accumulate(self, tokens, labels=None, documents=None, stream=0):
        """Adds one chunk's gradients (of its summed loss; apply() divides by the labelled
        tokens of all chunks, so k chunks then apply() equal one step on all of them).
        Returns this chunk's mean loss."""
        self._ranks.refuse_accumulate()
        if self.model.config.router_loss_coef:
            raise BadArgumentError("accumulate: the load-balancing loss (output_router_logits) is one forward "
                                   "pass's, not a sum over accumulated chunks; use step()")
        first = self._acc_labels == 0
        ring = self._engine.for_batch((tokens, labels, documents), stream)
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
        self._engine.ring.executor.scale_grads(1.0 / self._acc_labels)
        loss = self._acc_loss / self._acc_labels
        self._acc_loss, self._acc_labels = 0.0, 0
        self._adamw(hyperparameters)
        return loss

    def state_dict(self):
        """{"step": int, "exp_avg": {name: float32 numpy}, "exp_avg_sq": {...}, "hyperparameters": {...}}
        (m and v as torch.optim.AdamW names them; empty dicts before the first step), and
        "master": {name: float32 numpy} when the model keeps fp32 master weights; bf16 and 8-bit
        moments as trained (raw bytes per block, "optimizer_state" naming the precision)."""
        self._engine.wait_for_update()
        return trainer_state.state_dict(self)

    def load_state_dict(self, state, convert=False):
        """Restores step, m and v, master weights (and hyperparameters when present) from
        state_dict(). Master weights in the state need a model that keeps them; a model that
        keeps them without any in the state keeps the copies of its current weights. m and v
        stored in another precision than this Trainer's optimizer_state load only with
        convert=True (decoded to fp32, then rounded as the kernels store them).
        BadArgumentError naming the field for a malformed state, before anything changes."""
        self._engine.wait_for_update()
        trainer_state.load_state_dict(self, state, convert)
