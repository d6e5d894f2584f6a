"""The ranks a Trainer trains over, as the Trainer sees them: one process (OneRank), or the ranks
of a communicator (DataParallel), optionally with the optimizer state sharded over them (ZeRO-1).

Data-parallel (comm: a dataflow.distributed.Communicator, rebound to the model's handle): each
rank steps on its own batch; every block's gradient is summed over the ranks on comm_stream
(default 1 when the handle has two streams) as soon as it is final, while the lower blocks
differentiate (ring_executor.h); the loss is the mean over all ranks' labelled tokens, so every
rank applies the same AdamW (clipped on the global norm) and returns the same loss. Two small
host collectives per step (label count, loss) add two syncs; a step's batch must fit one
executor call. shard_optimizer=True (ZeRO-1, with comm): each rank keeps 1/N of the optimizer
state (m, v, master weights), the gradients are reduce-scattered instead of all-reduced, each
rank runs AdamW on its part and the weights are all-gathered; state_dict() and
load_state_dict() gather and split the state (every rank must call them), so checkpoints are
the same for any number of ranks. All-resident, the model's state is converted to the sharded
layout; in the ring, the plan is made for the rank count (plan.shard_ranks) and the executor
keeps 1/N of each block's state from the start (fp32, no master weights: ring_plan.h)."""
from .._ffi import ffi, modelslib, ringlib
from ..errors import BadArgumentError, check
from ..ring import Plan


def ranks_of(model, comm, comm_stream, shard_optimizer, optimizer_state):
    """OneRank() without comm, else DataParallel over comm's ranks; refuses shard_optimizer
    without comm or with a lean optimizer state."""
    if shard_optimizer and comm is None:
        raise BadArgumentError("Trainer: shard_optimizer shards the optimizer state over the ranks of comm; "
                               "pass comm=df.distributed.init()")
    if shard_optimizer and optimizer_state != "fp32":
        raise BadArgumentError(f"Trainer: shard_optimizer (ZeRO-1) shards fp32 optimizer state only, got "
                               f"optimizer_state={optimizer_state!r}")
    return OneRank() if comm is None else DataParallel(model, comm, comm_stream, bool(shard_optimizer))


class OneRank:
    """Training in one process: a sum over the ranks is the value itself."""
    shard_optimizer = False
    shard_ranks = 1  # the ranks a ring plan shards the optimizer state over

    def check_plan(self, plan):
        """A ring plan shards the optimizer state over as many ranks as these shard it (a plan
        of another type is RingTraining's to refuse)."""
        if isinstance(plan, Plan) and max(plan.shard_ranks, 1) != self.shard_ranks:
            raise BadArgumentError(f"Trainer: the plan shards the optimizer state over {plan.shard_ranks} ranks, "
                                   f"these ranks over {self.shard_ranks} (shard_optimizer with comm: its size); "
                                   f"plan with ring.plan(..., shard_ranks={self.shard_ranks})")

    def bind(self, executor):
        pass

    def shard(self, model, engine, shard):
        pass

    def refuse_accumulate(self):
        pass

    def num_labels(self, ring, chunks, stream):
        """The labelled tokens of a step's chunks over every rank."""
        return sum(c.num_labels for c in chunks)

    def mean_loss(self, model, losses, num_labels, stream):
        """The step's mean loss over every rank's labelled tokens; here the summed loss scaled in
        C, as the golden trajectory recorded it."""
        return model._batch_loss(losses, 1.0 / num_labels)


class DataParallel(OneRank):
    """The ranks of comm: gradients summed (ZeRO-1: reduce-scattered) by each executor, label
    counts and losses summed on the host."""

    def __init__(self, model, comm, comm_stream, shard_optimizer):
        self.comm = comm.on(model.handle)
        self.stream = comm_stream if comm_stream is not None else int(model.handle.num_streams > 1)
        self.shard_optimizer = shard_optimizer
        self.shard_ranks = self.comm.size if shard_optimizer else 1

    def bind(self, executor):
        executor.set_comm(self.comm, self.stream, self.shard_optimizer)

    def shard(self, model, engine, shard):
        """ZeRO-1: the optimizer state sharded over the ranks, or gathered whole (a collective)."""
        if not self.shard_optimizer or engine.plan is not None:
            return  # a ring executor keeps its state sharded from the start
        engine.forget()  # the state its executors adopted is about to move
        if bool(shard) == model._sharded():
            return
        model._on(0)
        blocks, numel = model._optimizer_blocks(), ffi.new("int64_t[]", len(model.layout.bytes))
        try:
            check(ringlib.dataflow_ring_shard_optimizer_state(model.handle._ptr(), self.comm._comm(), 0,
                                                              modelslib.dataflow_llama_blocked_model(model._m),
                                                              blocks, int(shard), numel))
        finally:  # the model owns the new memory (on an error too: the old one is freed)
            check(modelslib.dataflow_llama_set_optimizer_state(model._m, blocks, numel if shard else ffi.NULL))
        model._optimizer_sharded = bool(shard)
        if shard:
            self.comm._models.add(model)  # it refuses to close while the state is sharded over it

    def refuse_accumulate(self):
        raise BadArgumentError("accumulate: not supported with comm (data-parallel); use step()")

    def num_labels(self, ring, chunks, stream):
        if len(chunks) > ring.max_chunks:
            raise BadArgumentError(f"step: data-parallel, a step's batch must fit the plan's {ring.max_chunks} "
                                   f"chunks of {ring.plan.chunk_tokens} tokens (one executor call), got "
                                   f"{len(chunks)}; plan for the batch (Trainer(seq_len=..., batch_size=...))")
        return int(self.comm.sum_host([super().num_labels(ring, chunks, stream)], stream)[0])

    def mean_loss(self, model, losses, num_labels, stream):
        return float(self.comm.sum_host([model._batch_loss(losses, 1.0)], stream)[0] / num_labels)
