"""The ring executor (libdataflowring/include/dataflow/ring_executor.h) from Python: a Llama's
blocks trained from a plan, its state wherever the plan puts it (device or host memory)."""
import numpy as np

from .. import trace as traces
from .._ffi import ffi, modelslib, ringlib
from ..errors import BadArgumentError, DataflowError, check, open_pointer

# roles: Dataflow_Ring_Streams order, then comm (data-parallel) and disk (the disk tier)
STREAMS = ("compute", "inbound", "outbound", "optimizer", "comm", "disk")


class RingExecutor:
    """Blocked Llama `config` (LlamaConfig) in `dtype` on `handle`, trained from `plan`
    (dataflow.ring.Plan). Streams (default 0..3 of the handle): compute, inbound, outbound,
    optimizer; roles may share a stream. adopt: for an all-resident plan (dataflow.ring.resident_plan),
    a cdata Dataflow_Block_Memory[num_blocks] of a resident model's own memory, trained in place
    (its owner keeps it alive and closes the executor before freeing it).
    trace=True records a trace from the start (start_trace(); written by trace(path)).
    disk: a dataflow.training.disk_tier.DiskTier for a plan keeping optimizer state on disk."""

    def __init__(self, handle, config, plan, dtype, trace=False, streams=None, adopt=None, disk=None):
        self.handle, self.plan = handle, plan
        if adopt is None:
            model = ffi.new("Dataflow_Blocked_Model **")
            check(modelslib.dataflow_llama_blocked_model_create(handle._ptr(), config._c_config(dtype), model))
            self._bm, self._own_bm = model[0], True
        else:  # the resident model's own definition (it outlives the executor)
            blocks, owner = adopt
            self._bm, self._own_bm, adopt = modelslib.dataflow_llama_blocked_model(owner), False, blocks
        out = ffi.new("Dataflow_Ring_Executor **")
        roles = ffi.NULL
        if streams is not None:
            roles = ffi.new("Dataflow_Ring_Streams *")
            roles.compute, roles.inbound, roles.outbound, roles.optimizer = streams
        try:
            if adopt is None and disk is not None:
                spec = ffi.new("Dataflow_Ring_Disk *")
                directory = ffi.new("char[]", disk.directory.encode())
                spec.directory, spec.bytes_per_sec, spec.stream = directory, disk.throttle, disk.streams(handle)
                check(ringlib.dataflow_ring_executor_create_with_disk(handle._ptr(), self._bm, plan._c, roles, spec,
                                                                      out))
            elif adopt is None:
                check(ringlib.dataflow_ring_executor_create(handle._ptr(), self._bm, plan._c, roles, out))
            else:
                check(ringlib.dataflow_ring_executor_adopt(handle._ptr(), self._bm, plan._c, roles, adopt, out))
        except Exception:
            if self._own_bm:
                modelslib.dataflow_blocked_model_destroy(self._bm)
            raise
        self._x = out[0]
        self.num_blocks = modelslib.dataflow_blocked_model_num_blocks(self._bm)
        self._sizes = []
        for b in range(self.num_blocks):
            s = ffi.new("Dataflow_Block_Sizes *")
            check(modelslib.dataflow_blocked_model_block_sizes(self._bm, b, s))
            sizes = [int(s.bytes[k]) for k in range(5)]
            sizes[2] = sizes[3] = int(ringlib.dataflow_optimizer_state_bytes(plan._c.optimizer_state, s.numel))
            self._sizes.append((int(s.numel), sizes))  # m and v (kinds 2, 3) as the plan stores them
        self._trace, self._comm, self._shard_ranks = None, None, plan._c.shard_ranks
        if trace:
            self.start_trace()

    @property
    def disk_mode(self):
        """How the disk tier's file is accessed: "O_DIRECT", "buffered", or None (no disk tier)."""
        mode = ringlib.dataflow_ring_executor_disk_mode(self._ptr())
        return None if mode == ffi.NULL else ffi.string(mode).decode()

    @property
    def blocked_model(self):
        self._ptr()
        return self._bm

    def _ptr(self):
        return open_pointer(self._x, self.handle, "RingExecutor")

    @property
    def closed(self):
        return self._x is None

    def close(self):
        x, self._x = getattr(self, "_x", None), None
        if x is not None and self.handle._alive():
            ringlib.dataflow_ring_executor_destroy(x)
            if self._own_bm:
                modelslib.dataflow_blocked_model_destroy(self._bm)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def device_bytes(self):
        return int(ringlib.dataflow_ring_executor_device_bytes(self._ptr()))

    def host_bytes(self):
        return int(ringlib.dataflow_ring_executor_host_bytes(self._ptr()))

    def block_bytes(self, block, kind):
        return self._sizes[block][1][kind]

    def on_device(self, block, kind):
        """Whether the block's kind lives in device memory (else on the host)."""
        on = int(ringlib.dataflow_ring_executor_on_device(self._ptr(), block, kind))
        if on < 0:
            raise BadArgumentError(f"ring on_device: no block {block!r} kind {kind!r}")
        return bool(on)

    def read(self, block, kind):
        """The block's kind as raw bytes (uint8 numpy)."""
        out = np.empty(self.block_bytes(block, kind), np.uint8)
        check(ringlib.dataflow_ring_executor_read(self._ptr(), block, kind, ffi.from_buffer(out)))
        return out

    def write(self, block, kind, data):
        data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        if data.size != self.block_bytes(block, kind):
            raise BadArgumentError(f"ring write: block {block} kind {kind} holds {self.block_bytes(block, kind)} "
                                   f"bytes, got {data.size}")
        check(ringlib.dataflow_ring_executor_write(self._ptr(), block, kind, ffi.from_buffer(data)))

    def accumulate(self, packed_chunks, accumulate, loss_scale):
        """Submits forward/backward of PackedBatch chunks (at most chunks_per_round x rounds; a
        chunk with .past > 0 continues the document of the one before it: plan.kv_context)."""
        chunks = ffi.new("Dataflow_Ring_Chunk[]", len(packed_chunks))
        keep = []
        for c, p in zip(chunks, packed_chunks):
            buf = ffi.from_buffer("int32_t[]", p.buffer)
            keep.append(buf)
            c.buffer, c.num_tokens, c.num_docs, c.past = buf, p.num_tokens, p.num_docs, p.past
        check(ringlib.dataflow_ring_executor_accumulate(self._ptr(), chunks, len(packed_chunks), int(bool(accumulate)),
                                                        float(loss_scale)))

    def set_comm(self, comm, stream, shard_optimizer=False):
        """Data-parallel: each block's final gradient summed over comm's ranks (a
        dataflow.distributed.Communicator on this handle) on `stream` (ring_executor.h); a step's
        gradients must come from one accumulate call. shard_optimizer: ZeRO-1 over an adopted
        resident model's sharded state."""
        check(ringlib.dataflow_ring_executor_set_comm(self._ptr(), comm._comm(), stream, int(shard_optimizer)))
        comm._models.add(self)  # it forgets the communicator as that closes
        self._comm = comm

    def _forget_grad_comm(self):
        if self._x is not None and self.handle._alive():
            ringlib.dataflow_ring_executor_set_comm(self._x, ffi.NULL, 0, 0)
        self._comm = None

    def _sharded(self):
        """Whether its optimizer state is sharded over the communicator's ranks (a ZeRO-1 plan)."""
        return self._x is not None and self._shard_ranks > 1

    def scale_grads(self, factor):
        check(ringlib.dataflow_ring_executor_scale_grads(self._ptr(), float(factor)))

    def apply(self, params, max_grad_norm, step):
        check(ringlib.dataflow_ring_executor_apply(self._ptr(), params, float(max_grad_norm), int(step)))

    def wait(self):
        """Waits for everything queued, the update included (raising its failure)."""
        check(ringlib.dataflow_ring_executor_wait(self._ptr()))

    def wait_losses(self):
        """Waits for the last accumulate's token losses, not for the update queued after them."""
        check(ringlib.dataflow_ring_executor_wait_losses(self._ptr()))

    def token_losses(self, chunk_sizes):
        """Host copies of the last accumulate's token losses, per chunk (after wait() or wait_losses())."""
        out = ffi.new("Dataflow_Ring_Outputs *")
        check(ringlib.dataflow_ring_executor_outputs(self._ptr(), out))
        T = out.chunk_tokens
        flat = np.frombuffer(ffi.buffer(out.token_losses, 4 * T * len(chunk_sizes)), np.float32)
        return [flat[i * T:i * T + n].copy() for i, n in enumerate(chunk_sizes)]

    def start_trace(self, trace=None, keep=False):
        """Waits for the queued work, drops any earlier recording and records from now on: the
        start and end of each unit of work on its stream, memory at each wait(). trace: a
        dataflow.trace.Trace to record into (default: the executor's own); keep: go on with its
        recording (a Trainer's next executor) instead of starting it afresh."""
        if not keep:
            self.wait()  # queued spans stamp into the recording start() drops
        if trace is not None or self._trace is None:
            self._trace = trace or traces.Trace()
            check(ringlib.dataflow_ring_executor_set_trace(self._ptr(), self._trace._t))
        if not keep:
            self._trace.start()
            self.wait()  # the first memory sample

    def stop_trace(self):
        if self._trace is not None:
            self._trace.stop()

    def trace_events(self):
        """(spans, memory samples) recorded since start_trace (see dataflow.trace.Trace.read),
        streams named as STREAMS."""
        if self._trace is None:
            raise DataflowError("ring trace: nothing recorded; create the executor with trace=True or call "
                                "start_trace() before the steps to trace")
        self.handle.sync()  # every span stamped, no memory sample added
        return self._trace.read(ringlib.dataflow_ring_work_name, STREAMS.__getitem__)

    def trace(self, path):
        """Writes what was recorded since start_trace to `path` as Chrome trace-event JSON (opens in
        Perfetto): a track per stream, counter tracks for device and host memory; returns the dict."""
        spans, samples = self.trace_events()
        plan = self.plan
        used = {s["stream"] for s in spans}
        roles = tuple(r for i, r in enumerate(STREAMS) if i < 4 or r in used)
        trace = traces.chrome(spans, samples, roles, self.num_blocks, "dataflow ring executor", metadata={
            "plan": {"chunk_tokens": plan.chunk_tokens, "chunks_per_round": plan.chunks_per_round,
                     "rounds_per_step": plan.rounds_per_step, "weight_slots": plan.weight_slots,
                     "grad_slots": plan.grad_slots, "optimizer": plan.optimizer,
                     "predicted_step_seconds": plan.predicted_step_seconds}})
        traces.write(path, trace)
        return trace

    def grad_norm(self):
        out = ffi.new("Dataflow_Ring_Outputs *")
        check(ringlib.dataflow_ring_executor_outputs(self._ptr(), out))
        return float(out.grad_norm[0])

    def router_loss(self):
        """HF's load-balancing loss of the last accumulate, unweighted (after wait()); None for a
        model trained without it."""
        out = ffi.new("Dataflow_Ring_Outputs *")
        check(ringlib.dataflow_ring_executor_outputs(self._ptr(), out))
        return None if out.router_loss == ffi.NULL else float(out.router_loss[0])
