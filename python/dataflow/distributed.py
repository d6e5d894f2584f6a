"""Data-parallel training across processes (ranks) over libdataflowcomm (MPI on the host backend).

    comm = df.distributed.init()          # under mpirun -n N: comm.rank, comm.size
    t = df.Trainer(model, comm=comm)      # each rank steps on its own batch

Collectives run on a handle's stream like any op (comm.all_reduce(x, stream=1)); the sums are
deterministic (rank order), the same bits on every rank. A collective that waits longer than
`timeout` seconds for a peer fails, naming the ranks that did not answer.
"""
import os
import weakref

import numpy as np

from . import dtypes
from ._ffi import commlib, ffi
from .c_strings import c_string
from .errors import BadArgumentError, check, open_pointer
from .handle import Handle

REDUCE_OPS = {"sum": commlib.DATAFLOW_REDUCE_SUM, "avg": commlib.DATAFLOW_REDUCE_AVG}  # comm.h's enum
LAUNCHER_ENV = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")  # Open MPI's, then MPICH/Hydra's
RANK_ENV = ("OMPI_COMM_WORLD_RANK", "PMI_RANK")
LOCAL_SIZE_ENV = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")


def _launcher_int(names):
    value = next((os.environ[v] for v in names if v in os.environ), None)
    return int(value) if value is not None and value.isdigit() else None


def launcher_size():
    """The number of ranks mpirun started (None outside mpirun): known before MPI starts."""
    return _launcher_int(LAUNCHER_ENV)


def launcher_rank():
    """This process's rank as mpirun told it (None outside mpirun): known before MPI starts."""
    return _launcher_int(RANK_ENV)


def local_ranks():
    """How many ranks of this job share this machine (1 outside mpirun)."""
    return _launcher_int(LOCAL_SIZE_ENV) or 1


def _destroy(handle, c, models):
    """Releases a communicator, unless its handle was closed first: the handle took its
    collectives with it (and a job that failed must not wait in MPI_Finalize for a lost rank).
    The models that sum their gradients over it forget it first (C keeps no freed pointer)."""
    if handle._alive():
        for model in list(models):
            model._forget_grad_comm()
        commlib.dataflow_comm_destroy(c)


class Communicator:
    """The ranks of this job, bound to one handle: collectives read and write that handle's
    arrays on its streams. library: the MPI library to load (default $DATAFLOW_MPI_LIBRARY or
    libmpi.so.40); timeout: seconds a collective waits for a peer (default 300)."""

    def __init__(self, handle, library=None, timeout=None):
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            raise BadArgumentError(f"distributed: timeout must be a positive number of seconds, got {timeout!r}")
        self.handle, self.library, self.timeout = handle, library, timeout
        config = ffi.new("Dataflow_Comm_Config *")
        library_c = c_string(library, "distributed: library") if library else ffi.NULL
        config.library = library_c
        config.timeout_seconds = float(timeout or 0)
        out = ffi.new("Dataflow_Comm **")
        check(commlib.dataflow_comm_create(handle._ptr(), config, out))
        self._c = out[0]
        self.rank, self.size = commlib.dataflow_comm_rank(self._c), commlib.dataflow_comm_size(self._c)
        self._models = weakref.WeakSet()  # the models summing their gradients over it (Trainer(comm=...))
        self._close = weakref.finalize(self, _destroy, handle, self._c, self._models)

    @property
    def closed(self):
        return self._c is None

    def _comm(self):
        return open_pointer(self._c, self.handle, "Communicator")

    def close(self):
        """Waits for the handle's queued work and releases the communicator (the last one of
        the process finalizes MPI, unless a collective failed). Using it, or a Trainer that
        sums over it, afterwards raises ClosedError. Refused (BadArgumentError, still open)
        while a model shards its optimizer state over it: that state needs its ranks."""
        sharded = [m for m in self._models if m._sharded()]
        if sharded:
            raise BadArgumentError("Communicator.close: a model shards its optimizer state over this "
                                   "communicator's ranks; close that model first (Llama.close)")
        self._c = None
        self._close()

    def on(self, handle):
        """This communicator, or a new one over the same ranks bound to `handle` (every rank
        must call it in the same order)."""
        self._comm()
        return self if handle is self.handle else Communicator(handle, self.library, self.timeout)

    def _ptr(self, array, what):
        return ffi.cast("void *", array._ptr_for(self.handle, what))

    @staticmethod
    def _op(op):
        if op not in REDUCE_OPS:
            raise BadArgumentError(f"distributed: op must be one of {sorted(REDUCE_OPS)}, got {op!r}")
        return REDUCE_OPS[op]

    def all_reduce(self, x, out=None, op="sum", stream=0):
        """out (default: x, in place) = sum or mean over ranks of x; queued on stream."""
        out = x if out is None else out
        check(commlib.dataflow_submit_all_reduce(self._comm(), stream, dtypes.enum(x.dtype), x.size, self._ptr(x, "x"),
                                                 self._ptr(out, "out"), self._op(op)))
        return out

    def reduce_scatter(self, x, out, op="sum", stream=0):
        """out [x.size / size] = reduction over ranks of this rank's part of x."""
        check(commlib.dataflow_submit_reduce_scatter(self._comm(), stream, dtypes.enum(x.dtype), out.size,
                                                     self._ptr(x, "x"), self._ptr(out, "out"), self._op(op)))
        return out

    def all_gather(self, x, out, stream=0):
        """out [size * x.size]: part r is rank r's x."""
        check(commlib.dataflow_submit_all_gather(self._comm(), stream, dtypes.enum(x.dtype), x.size, self._ptr(x, "x"),
                                                 self._ptr(out, "out")))
        return out

    def broadcast(self, x, root=0, stream=0):
        """x of rank root into x of every rank."""
        check(commlib.dataflow_submit_broadcast(self._comm(), stream, dtypes.enum(x.dtype), x.size, self._ptr(x, "x"),
                                                int(root)))
        return x

    def sum_host(self, values, stream=0):
        """The fp64 sum over ranks of a small host vector (rank order; waits for it)."""
        arr = self.handle.from_numpy(np.ascontiguousarray(values, dtype=np.float64), stream=stream)
        self.all_reduce(arr, stream=stream)
        return arr.numpy(stream)


def init(handle=None, library=None, timeout=None):
    """Joins the ranks of this job (mpirun -n N python ...); one rank (size 1) outside mpirun.
    handle: the handle whose arrays the collectives use (default: a small host handle of its
    own; Trainer(comm=...) rebinds to the model's handle)."""
    if handle is None:
        handle = Handle("host", streams=1, device_memory="16MiB", threads=1)
    return Communicator(handle, library, timeout)
