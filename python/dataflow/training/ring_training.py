"""The Trainer's ring mode: whether a Llama's training fits its handle all-resident, else the
fastest ring plan (dataflow.ring) within the free device memory and a host budget, and the
training steps through the ring executor (dataflow.training.executor) with the all-resident
Trainer's semantics: a step's documents are packed into chunks of whole documents (at most the
plan's chunk_tokens each, in order; a document longer than that, when the plan has a K/V
context, as consecutive pieces of one chunk each), every chunk's gradient scaled by 1 / the
step's labelled tokens, so a step is one AdamW update on the mean loss of the whole batch.

Trainer(host_memory=..., seq_len, batch_size, profile, plan): with host_memory given ("8GiB" or
bytes) or a host-held model (Llama placement "host"; host_memory then defaults to what the host
has available), the Trainer plans (dataflow.ring.plan) for batches of batch_size sequences of
seq_len tokens (default: max_position_embeddings) under the handle's free device memory and
host_memory, with profile's speeds (default: this machine's, measured once,
dataflow.training.calibrate). When all-resident training fits, it trains all-resident and
.plan is None; else .plan is the plan and the model's weights move into the executor, which
streams them through device slots (the model is host-held from then on: state_dict,
save_pretrained and checkpoints read the executor; generate runs on a CPU copy, see Llama).
plan: a dataflow.ring.plan to use as given. A step syncs once per chunks_per_round x
rounds_per_step chunks; the executor runs on streams 0..3 of the handle. OutOfMemoryError (the
planner's, naming the least device and host memory) when no plan fits."""
import json

import numpy as np

from .. import ring
from .._ffi import ringlib
from ..errors import BadArgumentError, OutOfMemoryError
from ..handle import Handle, parse_bytes
from ..models.batch import PackedBatch, aligned_labels, flatten_documents
from ..models.host_blocks import host_memory_available
from ..models.llama import ADAM_M, ADAM_V, GRAD, MASTER, PARAM
from .calibration import calibrate
from .executor import RingExecutor

STREAMS = 4  # compute, inbound, outbound, optimizer (ring_executor.h)
_PROFILES = {}  # (backend, model, seq_len, tokens, dtype) -> its measured profile, calibrated once per process


def measured_profile(backend, config, seq_len, tokens, dtype):
    """The speeds of this machine's `backend` device on `config`'s layers, measured once per
    process on an uncapped handle of it (a second or two; fitted to the model where that is
    quick, dataflow.training.calibrate): a Trainer's default, so predicted times are this machine's."""
    key = (backend, json.dumps(config.to_dict(), sort_keys=True), seq_len, tokens, dtype)
    if key not in _PROFILES:
        h = Handle(backend, streams=2)
        try:
            _PROFILES[key] = calibrate(h, size=512, tokens=512, transfer_bytes=16 << 20, repeats=2,
                                            config=config, seq_len=seq_len, dtype=dtype,
                                            tokens_per_step=max(tokens, 2 * seq_len), fit_seconds=5.0)
        finally:
            h.close()
    return _PROFILES[key]


def _positive(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise BadArgumentError(f"Trainer: {name} must be a positive integer, got {value!r}")
    return int(value)


def state_bytes(model, optimizer_state):
    """Bytes of `model`'s AdamW moments m and v stored as optimizer_state (ring.OPTIMIZER_STATES)."""
    state = ring.optimizer_state_enum(optimizer_state, "Trainer")
    return sum(2 * int(ringlib.dataflow_optimizer_state_bytes(state, block[GRAD] // 4)) for block in model.layout.bytes)


def _device_free(model):
    """Device bytes an all-resident `model`'s training may use: the handle's free memory and the
    blocks the model holds (a plan counts what its executor adopts)."""
    h = model.handle
    held = [k for k in (PARAM, GRAD, ADAM_M, ADAM_V, MASTER) if model._block_array(0, k) is not None]
    return h.memory_capacity() - h.memory_in_use() + model.layout.total(held)


def _resident_plan(model, seq_len, tokens, free, optimizer_state):
    """ring.resident_plan of training `model` (its save level, dtype and master weights; AdamW's
    moments stored as optimizer_state) on batches of `tokens` tokens in sequences of at most
    seq_len, within `free` device bytes: the one estimate of all-resident training memory (the
    plan's memory map). OutOfMemoryError when it does not fit."""
    return ring.resident_plan(model.config, seq_len, tokens, free, save_level=model.save_level,
                              profile=ring.profile_names()[0], dtype=model.dtype, master_weights=model.master_weights,
                              optimizer_state=optimizer_state)


RUN_ON_DISK = ("optimizer state",)  # what the executor keeps on a disk tier (ring_executor.h)


def ring_plan(config, seq_len, device_bytes, host_bytes, tokens, dtype, master_weights, profile=None,
              optimizer_state="fp32", disk_bytes=None, disk_bandwidth=None, host_gradients="fp32", shard_ranks=1):
    """ring.plan of training `config` on `tokens` per step within device_bytes and host_bytes.
    profile None: only whether some plan fits, which depends on sizes, not speeds (a named
    profile's plan), so it is known before measuring this machine or building the model.
    OutOfMemoryError (the planner's, with the exact bytes added) when none fits."""
    try:
        return ring.plan(config, seq_len, device_bytes, host_bytes, tokens_per_step=tokens,
                         profile=profile or ring.profile_names()[0], dtype=dtype, master_weights=master_weights,
                         optimizer_state=optimizer_state, disk_memory=disk_bytes, disk_bandwidth=disk_bandwidth,
                         disk_kinds=RUN_ON_DISK if disk_bytes else None, host_gradients=host_gradients,
                         shard_ranks=shard_ranks)
    except OutOfMemoryError as e:  # the planner's figures are rounded: add the exact bytes
        raise OutOfMemoryError(f"{e} (in bytes: {parse_bytes(device_bytes, 'device'):,} device free, "
                               f"{parse_bytes(host_bytes, 'host'):,} host; the smallest plan needs "
                               f"{e.min_device_bytes:,} device, {e.min_host_bytes:,} host)") from None


def resident_training(model, batch, stream, current, optimizer_state="fp32"):
    """The RingTraining that trains all-resident `model` on `batch` ((tokens, labels, documents))
    on `stream`: `current` when it is open and its plan takes the batch as one chunk on that
    stream, else a new one (current closed first: its scratch memory goes back) of the
    all-resident plan for it, with AdamW's m and v stored as optimizer_state (bf16 and 8-bit
    ones are the executor's own: a new executor takes them over from current)."""
    _, _, lengths, _ = flatten_documents(*batch)
    seq_len, tokens = resident_shape(lengths)
    carried = None
    if current is not None and not current.executor.closed:
        p = current.plan
        if current.stream == stream and tokens <= p.chunk_tokens and (
                len(lengths) <= p.chunk_tokens // p.seq_len + 64):
            return current
        if optimizer_state != "fp32":  # the executor's own moments, as raw bytes per block
            x = current.executor
            carried = [(b, k, x.read(b, k)) for b in range(x.num_blocks) for k in (ADAM_M, ADAM_V)]
        current.executor.close()
        tokens = max(tokens, p.chunk_tokens)
        seq_len = min(seq_len, p.seq_len)
        tokens = -(-tokens // seq_len) * seq_len
    training = RingTraining(model, _resident_plan(model, seq_len, tokens, _device_free(model), optimizer_state),
                            stream)
    for b, k, raw in carried or ():
        training.executor.write(b, k, raw)
    return training


def choose_plan(model, host_memory, seq_len, batch_size, profile, optimizer_state="fp32", disk=None,
                host_gradients="fp32", shard_ranks=1):
    """None when `model` is all-resident and its training on batch_size sequences of seq_len
    tokens (default: max_position_embeddings) fits its handle; else the fastest ring plan within
    the handle's free device memory (what an all-resident model frees included) and host_memory
    (default: what the host has available). OutOfMemoryError (the planner's, with the least
    device and host memory a plan needs) when none fits. disk: a DiskTier the plan may use when
    host memory runs out (its bytes, and its measured rate, DiskTier.bytes_per_second).
    shard_ranks: a ring plan's optimizer state is sharded over that many ranks (ZeRO-1)."""
    h, config = model.handle, model.config
    seq_len = _positive(config.max_position_embeddings if seq_len is None else seq_len, "seq_len")
    tokens = seq_len * _positive(batch_size, "batch_size")
    free = _device_free(model) if model.placement == "device" else h.memory_capacity() - h.memory_in_use()
    if model.placement == "device":
        try:
            _resident_plan(model, seq_len, tokens, free, optimizer_state)
            return None
        except OutOfMemoryError:
            pass
    host = host_memory_available() if host_memory is None else parse_bytes(host_memory, "host_memory")
    args = (config, seq_len, free, host, tokens, model.dtype, model.master_weights)
    disk_bytes = None if disk is None else disk.bytes
    if profile is None:  # whether some plan fits: sizes only, no disk probe yet
        ring_plan(*args, optimizer_state=optimizer_state, disk_bytes=disk_bytes, host_gradients=host_gradients,
                  shard_ranks=shard_ranks)
        profile = measured_profile(h.backend, config, seq_len, tokens, model.dtype)
    return ring_plan(*args, profile=profile, optimizer_state=optimizer_state, disk_bytes=disk_bytes,
                     disk_bandwidth=None if disk is None else disk.bytes_per_second, host_gradients=host_gradients,
                     shard_ranks=shard_ranks)


def resident_shape(lengths):
    """(seq_len, tokens_per_step) of the all-resident plan that takes a batch of documents of
    these lengths as one chunk: a chunk holds up to tokens_per_step / seq_len + 64 documents."""
    total, docs = sum(lengths), len(lengths)
    seq_len = max(lengths)
    if docs > total // seq_len + 64:
        seq_len = max(1, total // (docs - 64))
    return seq_len, -(-total // seq_len) * seq_len


class ResidentTraining:
    """All-resident training: the executor of the all-resident plan over the model's own device
    blocks (resident_training), made for a batch's shape and stream, and again when a batch does
    not fit it (.current: the one of the last batch, None before the first)."""
    plan = None

    def __init__(self, model, optimizer_state):
        self.model, self.optimizer_state, self.current = model, optimizer_state, None

    def for_batch(self, batch, stream):
        self.model._m  # ClosedError for a closed model, before its memory is adopted
        ring = resident_training(self.model, batch, stream, self.current, self.optimizer_state)
        if ring is not self.current:
            self.current = ring
            self.model._on(stream)
        return ring


class RingTraining:
    """A model handed to a ring executor that trains it from `plan` (the model's weights, master
    weights and AdamW state move into the executor), or, with `stream`, an all-resident model
    whose own device blocks an executor of the all-resident `plan` trains in place, every role
    on `stream` (the model keeps them: forward and generate run on the device as before).
    bind: called with a new ring executor before the model's state moves in (the ranks: a plan
    sharding the optimizer state needs the executor to know its rank first)."""

    def __init__(self, model, plan, stream=None, disk=None, bind=None):
        if not isinstance(plan, ring.Plan):
            raise BadArgumentError(f"Trainer: plan must be a dataflow.ring.Plan (from dataflow.ring.plan), got "
                                   f"{type(plan).__name__}")
        self.plan, self.vocab = plan, model.config.vocab_size
        self.router_coef = model.config.router_loss_coef
        self.max_chunks = plan.chunks_per_round * plan.rounds_per_step
        if stream is not None:
            self.stream = stream
            self.executor = model._adopted_by(lambda blocks: RingExecutor(
                model.handle, model.config, plan, model.dtype, streams=(stream,) * STREAMS, adopt=blocks), stream,
                fp32_state=plan.optimizer_state == "fp32")
            return
        if model.handle.num_streams < STREAMS:
            raise BadArgumentError(f"Trainer: training in the ring needs a handle with {STREAMS} streams (compute, "
                                   f"inbound, outbound, optimizer); this one has {model.handle.num_streams}")
        if bool(plan.master_weights) != model.master_weights:
            raise BadArgumentError(f"Trainer: the plan was made {'with' if plan.master_weights else 'without'} fp32 "
                                   f"master weights, but the model keeps {'them' if model.master_weights else 'none'}")
        self.stream = None
        def bound():
            executor = RingExecutor(model.handle, model.config, plan, model.dtype, disk=disk)
            if bind is not None:
                bind(executor)
            return executor
        self.executor = model._hand_to(bound, fp32_state=plan.optimizer_state == "fp32")

    @property
    def current(self):
        return self

    def for_batch(self, batch, stream):
        """The ring runs every batch in its chunks on its own streams."""
        return self

    def updated(self, model):
        """After an optimizer step: an adopting executor's model waits for it before its next work;
        a model whose weights the executor holds reads them anew."""
        if self.stream is None:
            model._weights_changed()
        else:
            model._stream = self.stream

    def chunks(self, tokens, labels, documents, what):
        """The batch as PackedBatch chunks of whole documents, at most chunk_tokens tokens each; a
        longer document (plan.kv_context, up to seq_len tokens) as pieces continuing each other."""
        flat, labels, lengths, _ = flatten_documents(tokens, labels, documents)
        if labels is not None:  # checked over the whole batch: errors name batch positions, not a chunk's
            aligned_labels(flat, labels, np.concatenate([[0], np.cumsum(lengths)]), self.vocab)
        labels = None if labels is None else np.asarray(labels).reshape(-1)
        limit, out, start, group = self.plan.chunk_tokens, [], 0, []
        longest = self.plan.seq_len if self.plan.kv_context else limit
        for n in lengths + [None]:
            if n is not None and n > longest:
                raise BadArgumentError(f"{what}: a sequence of {n} tokens is longer than the plan's "
                                       f"{'sequences' if self.plan.kv_context else 'chunks'} of {longest} tokens; "
                                       f"plan for longer sequences (Trainer(seq_len={n}))")
            if group and (n is None or n > limit or sum(group) + n > limit):
                end = start + sum(group)
                docs, cut = [], start
                for g in group:
                    docs.append(flat[cut:cut + g])
                    cut += g
                out.append(PackedBatch(docs, None if labels is None else labels[start:end], None, self.vocab, True))
                start, group = end, []
            if n is not None and n > limit:
                out += self._pieces(flat[start:start + n], None if labels is None else labels[start:start + n])
                start += n
            elif n is not None:
                group.append(n)
        return out

    def _pieces(self, doc, labels):
        """One document as consecutive chunks of chunk_tokens (the last shorter), each attending
        over the K/V of the ones before: labels aligned over the whole document first."""
        limit, targets = self.plan.chunk_tokens, aligned_labels(doc, labels, [0, doc.size], self.vocab)
        return [PackedBatch(doc[p:p + limit], targets[p:p + limit], None, self.vocab, True, past=p, aligned=True)
                for p in range(0, doc.size, limit)]

    def run(self, chunks, accumulate, loss_scale, then=None):
        """Forward, loss and backward of the chunks (max_chunks per executor call, gradients
        added after the first), then `then()` (e.g. the optimizer step) after the last call;
        returns the token losses of every chunk, in order, as one array, once they are known
        (an update queued by `then` may still run: Engine.wait_for_update). A mixture of experts
        trained with HF's load-balancing loss: .aux_loss, router_aux_loss_coef times that loss of
        the call (0.0 without one)."""
        losses, first, self.aux_loss = [], 0, 0.0
        if self.router_coef and len(chunks) > self.max_chunks:
            raise BadArgumentError(f"a step with the load-balancing loss (output_router_logits) must fit one "
                                   f"executor call of {self.max_chunks} chunks (its forward passes), got "
                                   f"{len(chunks)}; plan for the batch (Trainer(seq_len=..., batch_size=...))")
        while first < len(chunks):
            end = min(first + self.max_chunks, len(chunks))
            while end < len(chunks) and chunks[end].past:  # a document's pieces stay in one call
                end -= 1
            group = chunks[first:end]
            self.executor.accumulate(group, accumulate or first > 0, loss_scale)
            if then is not None and end >= len(chunks):
                then()
            self.executor.wait_losses()
            losses += self.executor.token_losses([c.num_tokens for c in group])
            router_loss = self.executor.router_loss()
            self.aux_loss = 0.0 if router_loss is None else self.router_coef * router_loss
            first = end
        return np.concatenate(losses)
