"""The executor each batch of a Trainer runs in, and what every new one is handed: the ranks
(data_parallel), a state loaded before it existed (trainer_state), the trace being recorded.

All-resident (the model on the device and its training fits): the executor of the all-resident
plan (dataflow.ring.resident_plan) trains the model's own device blocks in place, every role on
the step's `stream`; it is made at the first step for that batch's shape and again when a batch
does not fit it or the stream changes (its scratch, activations and working set, is freed then;
the model keeps its weights, so forward and generate run on the device between steps).
Otherwise the ring's (dataflow.training.ring_training), one executor for the Trainer's life.

Trace (Trainer(trace=True) or start_trace()): what the executors ran (dataflow.trace,
RingExecutor.trace), a track per role (compute, inbound, outbound, optimizer, and comm when
data-parallel), device and host memory counters sampled after each step. Recording changes no
result; it costs two host ops per span and ~64 bytes of host memory per span (about 4 L + 8
spans per step of L layers all-resident, more in the ring), so trace the steps you need."""
from .. import trace as traces
from ..errors import BadArgumentError, DataflowError
from .ring_training import ResidentTraining, RingTraining, choose_plan


def refuse_untrainable(model):
    """BadArgumentError for a model the engine cannot train: quantized, or another's."""
    if model.config.quantization:
        raise BadArgumentError(f"Trainer: the model's linear weights are quantized "
                               f"(int{model.config.quantization['bits']}), for inference only; train the "
                               f"full-precision model and quantize it afterwards (dataflow quantize)")
    if model._in_ring():
        raise BadArgumentError("Trainer: another Trainer trains this model in its ring executor, which holds "
                               "its weights and optimizer state; keep training with that Trainer, or save a "
                               "checkpoint and restore it into a new model")


class Engine:
    """.ring: the RingTraining of the last batch (None before the first step of all-resident
    training, and after forget())."""

    def __init__(self, model, plan, planning, optimizer_state, ranks, on_new, disk=None, host_gradients="fp32"):
        """plan: a dataflow.ring.Plan, or None to choose one (choose_plan) when planning
        ((host_memory, seq_len, batch_size, profile)) or a disk tier (disk_tier.DiskTier) asks
        for it or the model is host-held; a chosen plan keeps host-held gradients as
        host_gradients says."""
        if plan is None and (planning[0] is not None or model.placement == "host" or disk is not None):
            plan = choose_plan(model, *planning, optimizer_state, disk, host_gradients, ranks.shard_ranks)
        ranks.check_plan(plan)
        self.model, self.plan, self._ranks, self._on_new = model, plan, ranks, on_new
        self._source = (ResidentTraining(model, optimizer_state) if plan is None
                        else RingTraining(model, plan, disk=disk, bind=ranks.bind))
        self.ring, self._trace, self._norm, self._norm_pending = None, None, None, False
        if self._source.current is not None:
            self._use(self._source.current)

    def for_batch(self, batch, stream):
        """The RingTraining that runs this batch ((tokens, labels, documents)) on `stream`."""
        ring = self._source.for_batch(batch, stream)
        if ring is not self.ring:
            self._use(ring)
        return ring

    def _use(self, ring):
        self.ring = ring
        self._on_new(ring.executor)
        self._ranks.bind(ring.executor)
        if self._trace is not None and self._trace.recording:
            ring.executor.start_trace(self._trace, keep=True)

    def apply(self, params, grad_clip, step):
        """Submits the AdamW step of the last batch's gradients and the read-back of its norm."""
        self.ring.executor.apply(params, grad_clip, step)
        self._norm_pending = True
        self.ring.updated(self.model)

    def wait_for_update(self, waited=False):
        """The sync point before reading weights or optimizer state: apply returns with the
        update queued (step() waits for the loss only), so this waits for it (unless the caller's
        wait did: waited), raises its failure (DataflowError) and reads its gradient norm."""
        if self._norm_pending:
            self._norm_pending = False
            if not waited:
                self.ring.executor.wait()
            self._norm = self.ring.executor.grad_norm()

    def loss_known(self):
        """After step() waited for its loss: an all-resident executor runs every role on the
        step's stream, so that wait finished the update too; its norm is read now (no further
        sync), before a batch of another shape replaces the executor. The ring's update may
        still run under the next step's forward."""
        if self.ring.stream is not None:
            self.wait_for_update(waited=True)

    def grad_norm(self):
        """The pre-clip global gradient norm of the last apply (None before one)."""
        self.wait_for_update()
        return self._norm

    def forget(self):
        """Closes the executors that adopted the model's state (about to move); the next batch
        adopts it again."""
        self.wait_for_update()
        for executor in list(self.model._adopters):
            executor.close()
        self.ring = None

    def start_trace(self):
        """Waits for the queued work, drops any earlier recording and records from now on."""
        if self._trace is None:
            self._trace = traces.Trace()
        if self.ring is not None:
            self.ring.executor.start_trace(self._trace)
        else:  # before the first step of all-resident training: no executor yet, nor its host arrays
            self._trace.start()
            self._trace.sample(self.model.handle, 0)

    def stop_trace(self):
        if self._trace is not None:
            self._trace.stop()

    def recorded(self):
        """The executor whose recording trace_events() and trace(path) read."""
        if self.ring is None or self._trace is None:
            raise DataflowError("trace: nothing recorded; create the Trainer with trace=True or call "
                                "start_trace() before the steps to trace")
        return self.ring.executor
