"""Handle: one backend device (host or cuda) with its streams, memory and op table."""
import math
import re
import weakref
from fractions import Fraction

import numpy as np

from . import dtypes
from ._ffi import ffi, lib, opslib, use_nvidia_wheels
from .array import Array
from .c_strings import c_bytes, c_string
from .custom_ops import register_external, register_native
from .errors import BadArgumentError, OutOfMemoryError, UnsupportedError, check, open_pointer
from .queued_work import QueuedWork

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(value, what="size"):
    """256, "256MiB", "1.5GB" -> bytes."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        n = int(value)
    else:
        m = re.fullmatch(r"\s*([0-9]{1,30}|[0-9]{0,30}\.[0-9]{1,30})\s*([a-zA-Z]*)\s*", str(value))
        if not m or m.group(2).lower() not in _UNITS:
            raise BadArgumentError(f"{what}: expected bytes as an int or a string like '256MiB', got {value!r:.80}")
        n = int(Fraction(m.group(1)) * _UNITS[m.group(2).lower()])  # exact: no float overflow or rounding
    if n <= 0:
        raise BadArgumentError(f"{what}: must be > 0 bytes, got {value!r}")
    if n >= 2**64:
        raise BadArgumentError(f"{what}: {value!r} is {n} bytes, which does not fit in 64 bits")
    return n


class Event:
    """A recorded point in one stream's work (Dataflow_Stream_State); usable by other handles."""

    def __init__(self, state, stream):
        self._state = state
        self.stream = stream


@ffi.callback("void(void *)")
def _run_host_op(job):
    """submit_host_op's C function; job is a handle to (QueuedWork, stream, fn)."""
    work, stream, fn = ffi.from_handle(job)
    work.run(stream, fn, fn)


class Handle:
    """A device: Handle("host", streams=4, device_memory="256MiB", threads=None,
    transfer_bandwidth=None, options=None). Default ops are registered at creation.

    threads and transfer_bandwidth are host backend options (compute threads; an emulated link
    bandwidth for transfers, bytes/s); options passes backend options as the C config does
    ("threads=2,transfer_bytes_per_sec=1e9").

    Thread-safe: several threads may submit, transfer, sync, allocate and register at once. A
    sync waits for the work submitted before it began and releases only that work's host
    buffers, never those another thread queued meanwhile. close() is the exception: call it
    once no other thread uses the handle, and not from the handle's own host ops or external
    ops (that raises)."""

    def __init__(self, backend="host", streams=4, device_memory=None, threads=None, transfer_bandwidth=None,
                 options=None, register_default_ops=True):
        if not isinstance(backend, str):
            raise BadArgumentError(f"Handle: backend must be a string like 'host' or 'cuda:0', got {backend!r}")
        if options is not None and not isinstance(options, str):
            raise BadArgumentError(f"Handle: options must be a string like 'threads=2', got {options!r}")
        config = ffi.new("Dataflow_Handle_Config *")
        config.num_streams = self._int_arg(streams, "streams", lib.DATAFLOW_MAX_STREAMS)
        if device_memory is not None:
            config.device_memory_bytes = parse_bytes(device_memory, "device_memory")
        pairs = [options] if options else []
        if threads is not None:
            pairs.append(f"threads={self._int_arg(threads, 'threads')}")  # the backend checks the range
        if transfer_bandwidth is not None:
            pairs.append(f"transfer_bytes_per_sec={parse_bytes(transfer_bandwidth, 'transfer_bandwidth')}")
        options_c = c_string(",".join(pairs), "Handle: options")
        config.options = options_c
        if backend.startswith("cuda"):
            use_nvidia_wheels()
        out = ffi.new("Dataflow_Handle **")
        check(lib.dataflow_handle_create(c_bytes(backend, "Handle: backend"), config, out))
        self.backend = backend
        self.num_streams = lib.dataflow_handle_num_streams(out[0])
        self._work = QueuedWork(self.num_streams)
        self._python_ops = {}  # Python external ops' states, until C destroys their records
        self._peers = weakref.WeakSet()  # handles whose memory ops on this one may use
        self._h = out[0]
        if register_default_ops:
            try:
                check(opslib.dataflow_register_default_ops(self._h))
            except Exception:
                self.close()
                raise

    @staticmethod
    def _int_arg(value, what, maximum=None):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1 or (
                maximum is not None and value > maximum):
            bounds = f"an integer in 1..{maximum}" if maximum is not None else "a positive integer"
            raise BadArgumentError(f"Handle: {what} must be {bounds}, got {value!r}")
        return int(value)

    # ---- lifetime ----
    def _alive(self):
        return getattr(self, "_h", None) is not None

    def _ptr(self):
        return open_pointer(getattr(self, "_h", None), None, "handle")

    def close(self):
        """Waits for queued work and releases the device; arrays of this handle become invalid.
        Raises (and the handle stays open) when called from the handle's own queued work.
        Exceptions of Python callbacks that no sync reported are dropped."""
        h = getattr(self, "_h", None)
        if h is None:
            return
        # the handle stays usable until C destroyed it: a refused close (from the handle's own
        # work; another close under way) must not look closed to the threads still using it
        check(lib.dataflow_handle_destroy(h))
        self._h = None
        self._work.clear()
        self._python_ops.clear()  # C destroyed every record; nothing can call them now

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _call(self, entry, *args):
        check(getattr(lib, "dataflow_" + entry)(self._ptr(), *args))

    # ---- memory ----
    def _memory_info(self):
        info = ffi.new("Dataflow_Memory_Info *")
        self._call("memory_info", info)
        return info

    def memory_capacity(self):
        """Device memory this handle may allocate, in bytes."""
        return int(self._memory_info().capacity_bytes)

    def memory_in_use(self):
        """Bytes allocated (in 256-byte units), freed memory included until the work queued
        before its free is done."""
        return int(self._memory_info().in_use_bytes)

    def memory_peak(self):
        """The highest memory_in_use() since the handle was created or reset_memory_peak()."""
        return int(self._memory_info().peak_bytes)

    def reset_memory_peak(self):
        """Restarts memory_peak() at the bytes in use now."""
        self._call("reset_memory_peak")

    def alloc(self, nbytes):
        """Raw allocation; returns the device pointer as an int."""
        if not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
            raise BadArgumentError(f"alloc: nbytes must be a positive integer, got {nbytes!r}")
        if nbytes >= 2**64:
            raise OutOfMemoryError(f"device memory: cannot allocate {nbytes} bytes: more than 64-bit sizes hold "
                                   f"(capacity is {self.memory_capacity()} bytes)")
        out = ffi.new("void **")
        self._call("alloc_mem", int(nbytes), out)
        return int(ffi.cast("uintptr_t", out[0]))

    def _free(self, ptr):
        self._call("free_mem", ffi.cast("void *", ptr))

    def free(self, ptr):
        """Frees an Array of this handle (not a view) or a pointer from alloc()."""
        if isinstance(ptr, Array):
            ptr._free_from(self)
        else:
            self._free(ptr)

    def empty(self, shape, dtype="fp32"):
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        if any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
            raise BadArgumentError(f"empty: shape must be non-negative integers, got {shape}")
        nbytes = math.prod(shape) * dtypes.itemsize(dtype)
        if nbytes == 0:
            raise BadArgumentError(f"empty: shape {shape} has no elements; device arrays need at least one")
        return Array(self, self.alloc(nbytes), shape, dtype)

    def zeros(self, shape, dtype="fp32", stream=0):
        a = self.empty(shape, dtype)
        self.set_mem(a, 0, stream=stream)
        return a

    def from_numpy(self, values, dtype=None, stream=0):
        """Copies a numpy array to the device (dtype from numpy unless given; values are
        rounded to nearest even for bf16/fp16/fp8) and waits for the copy."""
        values = np.asarray(values)
        dtype = dtype or dtypes.from_numpy(values.dtype)
        if values.ndim == 0:
            values = values.reshape(1)
        return self.empty(values.shape, dtype).copy_from_numpy(values, stream=stream)

    def host_view(self, ptr, shape, dtype):
        """A numpy view of device memory; host backend only (its device memory is host RAM).
        For Python external ops, which receive tensors as int pointers."""
        if ffi.string(lib.dataflow_handle_backend_name(self._ptr())).decode() != "host":
            raise UnsupportedError(f"host_view: only the host backend's memory is host-addressable, not {self.backend}")
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        storage = np.dtype(dtypes.STORAGE[dtype])
        nbytes = math.prod(shape) * storage.itemsize
        self._call("check_mem_range", ffi.cast("void *", ptr), nbytes, b"host_view")
        return np.frombuffer(ffi.buffer(ffi.cast("char *", ptr), nbytes), dtype=storage).reshape(shape)

    def set_mem(self, array, byte_value, stream=0):
        """Fills an array's bytes with byte_value, in stream order."""
        if not isinstance(byte_value, (int, np.integer)) or not 0 <= byte_value <= 255:
            raise BadArgumentError(f"set_mem: byte value must be an int in [0, 255], got {byte_value!r}")
        self._call("set_mem", stream, array.cdata, int(byte_value), array.nbytes)

    # ---- transfers: asynchronous; host buffers stay referenced until a sync passes them ----
    @staticmethod
    def _host_buffer(buf, nbytes, what, writable):
        if not isinstance(buf, np.ndarray) or not buf.flags.c_contiguous or (writable and not buf.flags.writeable):
            raise BadArgumentError(f"{what}: expected a C-contiguous{' writable' if writable else ''} numpy array")
        if buf.nbytes != nbytes:
            raise BadArgumentError(f"{what}: host buffer has {buf.nbytes} bytes, device array {nbytes}")
        return ffi.from_buffer(buf, require_writable=writable)

    def inbound_transfer(self, dst, host_src, stream=0):
        src = self._host_buffer(host_src, dst.nbytes, "inbound transfer source", False)
        self._call("submit_inbound_transfer", stream, dst.cdata, src, dst.nbytes)
        self._work.keep(stream, host_src)

    def outbound_transfer(self, host_dst, src, stream=0):
        dst = self._host_buffer(host_dst, src.nbytes, "outbound transfer destination", True)
        self._call("submit_outbound_transfer", stream, dst, src.cdata, src.nbytes)
        self._work.keep(stream, host_dst)

    def peer_transfer(self, dst, src, stream=0):
        if dst.nbytes != src.nbytes:
            raise BadArgumentError(f"peer transfer: destination has {dst.nbytes} bytes, source {src.nbytes}")
        self._call("submit_peer_transfer", stream, dst.cdata, src.cdata, src.nbytes)

    def enable_peer_access(self, peer):
        self._call("enable_access_to_peer_mem", peer._ptr())
        self._peers.add(peer)

    def disable_peer_access(self, peer):
        self._call("disable_access_to_peer_mem", peer._ptr())
        self._peers.discard(peer)

    # ---- ordering ----
    def record(self, stream=0):
        """An event marking everything submitted to `stream` so far."""
        state = ffi.new("Dataflow_Stream_State *")
        self._call("get_stream_state", stream, state)
        return Event(state, stream)

    def wait(self, stream, event):
        """Makes `stream` wait (on the device, not here) until `event`'s work has finished."""
        if not isinstance(event, Event):
            raise BadArgumentError(f"wait: event must come from Handle.record, got {type(event).__name__}")
        self._call("submit_dependency", stream, event._state)

    def sync(self, stream=None):
        """Blocks until the work queued on the stream (or on every stream) before this call is
        done; raises the first error of asynchronous work: a C op's failure, or a CallbackError
        for an exception a Python callback raised on a stream this sync covers (each once)."""
        covered = self._work.begin_sync()
        if stream is None:
            self._call("sync_handle")
            self._work.end_sync(range(self.num_streams), covered)
        else:
            self._call("sync_stream", stream)
            self._work.end_sync((stream,), covered)

    def host_syncs(self):
        """How many times the host has blocked on this handle's work (syncs) so far."""
        return int(lib.dataflow_handle_host_syncs(self._ptr()))

    def submit_host_op(self, fn, stream=0):
        """Runs fn() on the stream's worker, in stream order. An exception it raises is raised
        by the next sync covering the stream (a CallbackError chained to it)."""
        if not callable(fn):
            raise BadArgumentError(f"submit_host_op: fn must be callable, got {type(fn).__name__}")
        job = ffi.new_handle((self._work, stream, fn))
        self._call("submit_host_op", _run_host_op, job, stream)
        self._work.keep(stream, job)

    # ---- user ops ----
    def register_native_op(self, name, arg_dtypes, source=None, library=None, symbol=None, launch=None,
                           init=None, replace=False, compile_flags=(), signature=None):
        """Registers a native kernel from C source (compiled with the system compiler into a
        cached shared object) or from a prebuilt shared object; returns a callable CustomOp.
        signature: the op's signature (dataflow/op_signature.h), e.g.
        "n; x: in[n]; y: out[n] alias x; require n > 0"; every submission is checked against
        it before the kernel runs, and a signature that does not compile fails the
        registration."""
        return register_native(self, name, arg_dtypes, source, library, symbol, launch, init, replace,
                               compile_flags, signature)

    def register_external_op(self, name, arg_dtypes, fn=None, library=None, symbol=None, init=None,
                             replace=False, signature=None):
        """Registers an external op: a Python callable fn(*args) (tensor args arrive as int device
        pointers, scalars as numbers), or a function in a shared object; returns a CustomOp.
        fn runs on the stream's worker; an exception it raises is raised by the next sync
        covering that stream. A replaced fn is released once no queued work can call it.
        signature: as for register_native_op."""
        return register_external(self, name, arg_dtypes, fn, library, symbol, init, replace, signature)
