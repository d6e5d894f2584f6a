"""Python exceptions for C statuses, carrying the C library's message."""
from ._ffi import ffi, lib


class DataflowError(RuntimeError):
    """A dataflow call failed; .status is the C status code, the message is the C message."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


class BadArgumentError(DataflowError, ValueError):
    pass


class OutOfMemoryError(DataflowError, MemoryError):
    pass


class ClosedError(BadArgumentError):
    """A wrapper of a C object (handle, communicator, model, KV cache, executor) was used after
    it, or the handle it lives on, was closed."""


def require_open(closed, handle, what):
    """The one closed guard of every wrapper: ClosedError naming it once it, or the handle it
    lives on, is closed; C is never called with a freed pointer to find out."""
    if closed:
        raise ClosedError(f"{what} is closed")
    if handle is not None and not handle._alive():
        raise ClosedError(f"{what}: its handle is closed")


def open_pointer(ptr, handle, what):
    """A wrapper's C pointer (None once closed), through require_open."""
    require_open(ptr is None, handle, what)
    return ptr


def c_size(value, what):
    """The result of a C size helper (dataflow_*_bytes, *_numel), which returns -1 for arguments
    out of its range: an error here, never a size to add up."""
    if value < 0:
        raise BadArgumentError(f"{what}: the arguments are beyond what the C library sizes (it returned {value})")
    return int(value)


class UnknownOpError(DataflowError, LookupError):
    pass


class AlreadyRegisteredError(DataflowError):
    pass


class LoadError(DataflowError, OSError):
    pass


class UnsupportedError(DataflowError):
    pass


class CallbackError(DataflowError):
    """A Python callback run on a stream worker (a host op, a Python external op) raised; the
    next sync covering its stream raises this once, chained to the original (__cause__)."""


class FileFormatError(DataflowError, ValueError):
    """A file (safetensors, config.json, checkpoint) is missing, truncated or inconsistent;
    the message names the file and, where one is at fault, the tensor or field."""


_BY_STATUS = {
    lib.DATAFLOW_ERR_INVALID_ARGUMENT: BadArgumentError,
    lib.DATAFLOW_ERR_OUT_OF_MEMORY: OutOfMemoryError,
    lib.DATAFLOW_ERR_UNKNOWN_OP: UnknownOpError,
    lib.DATAFLOW_ERR_ALREADY_REGISTERED: AlreadyRegisteredError,
    lib.DATAFLOW_ERR_LOAD_FAILED: LoadError,
    lib.DATAFLOW_ERR_UNSUPPORTED: UnsupportedError,
}


def error_for(status):
    """The exception for a failed status, with this thread's C error message."""
    message = ffi.string(lib.dataflow_last_error()).decode(errors="replace")
    name = ffi.string(lib.dataflow_status_name(status)).decode()
    return _BY_STATUS.get(status, DataflowError)(message or name, status)


def check(status):
    if status != lib.DATAFLOW_OK:
        raise error_for(status)
