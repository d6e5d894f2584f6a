"""Device arrays: a pointer into a handle's device memory plus shape and datatype."""
import math

import numpy as np

from . import dtypes
from ._ffi import ffi
from .errors import BadArgumentError


class Array:
    """A block of device memory holding a row-major array.

    Owns its allocation (freed on free() or garbage collection) unless it is a view.
    numpy() waits for all queued work on the handle, then copies back. Using an array once it
    (or the array it views) was freed, or its handle closed, is a BadArgumentError.
    """

    def __init__(self, handle, ptr, shape, dtype, owner=None):
        self.handle = handle
        self.ptr = ptr
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self._owner = owner  # what keeps the memory alive (the Array it views, a model); None: owns it
        self._base = owner if isinstance(owner, Array) else None  # freeing it invalidates this view
        self._cdata = None  # ffi.cast of ptr, made once: a cast costs more than the rest of a use

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def nbytes(self):
        return self.size * dtypes.itemsize(self.dtype)

    @property
    def cdata(self):
        if not self.ptr or (self._base is not None and not self._base.ptr):
            raise BadArgumentError(f"{self!r}: {self._unusable()}")
        if self._cdata is None:
            self._cdata = ffi.cast("void *", self.ptr)
        return self._cdata

    def _unusable(self):
        """Why this array's memory cannot be used any more, or None."""
        if not self.ptr:
            return "the array was freed"
        if self._base is not None and not self._base.ptr:
            return "the array is a view of a freed array"
        if not self.handle._alive():
            return "the array's handle is closed"
        return None

    def _ptr_for(self, handle, what):
        """The pointer, for an op submitted to `handle`; `what` names the argument in errors."""
        why = self._unusable()
        if why is None and self.handle is not handle and self.handle not in handle._peers:
            why = "the array belongs to another handle (handle.enable_peer_access(other) lets ops use its memory)"
        if why:
            raise BadArgumentError(f"{what}: {why}")
        return self.ptr

    def __repr__(self):
        return f"dataflow.Array(shape={self.shape}, dtype={self.dtype!r}, ptr=0x{self.ptr:x})"

    def view(self, shape=None, offset_elements=0, dtype=None):
        """An array over part of this one's memory (no copy); keeps this one alive."""
        why = self._unusable()
        if why:
            raise BadArgumentError(f"view: {why}")
        dtype = dtype or self.dtype
        shape = self.shape if shape is None else tuple(shape)
        nbytes = math.prod(shape) * dtypes.itemsize(dtype)
        start = offset_elements * dtypes.itemsize(self.dtype)
        if offset_elements < 0 or start + nbytes > self.nbytes:
            raise BadArgumentError(f"view: {nbytes} bytes at element offset {offset_elements} do not fit in "
                                   f"an array of {self.nbytes} bytes")
        return Array(self.handle, self.ptr + start, shape, dtype, owner=self._owner or self)

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        if math.prod(shape) != self.size:
            raise BadArgumentError(f"reshape: cannot view {self.shape} ({self.size} elements) as {tuple(shape)}")
        return self.view(shape)

    def raw(self, stream=0):
        """The stored bits as a numpy array of the storage dtype (uint16 for bf16)."""
        out = np.empty(self.shape, dtype=dtypes.STORAGE[self.dtype])
        self.handle.sync()
        self.handle.outbound_transfer(out, self, stream=stream)
        self.handle.sync(stream)
        return out

    def numpy(self, stream=0):
        """Values as numpy (float32 for bf16 and fp8, which numpy lacks)."""
        return dtypes.decode(self.raw(stream), self.dtype)

    def copy_from_numpy(self, values, stream=0):
        """Writes values (converted to this array's dtype) and waits for the copy."""
        values = np.asarray(values)
        if values.shape != self.shape:
            raise BadArgumentError(f"copy_from_numpy: shape {values.shape} does not match the array's {self.shape}")
        bits = dtypes.encode(values, self.dtype)
        self.handle.inbound_transfer(self, bits, stream=stream)
        self.handle.sync(stream)
        return self

    def free(self):
        """Frees the allocation: invalid at once, reused after the work queued before it finishes.
        On a view, only the view becomes invalid. Once freed, free() does nothing."""
        if self._owner is None and self.ptr and self.handle._alive():
            self.handle._free(self.ptr)
        self.ptr = 0

    def _free_from(self, handle):
        """handle.free(array): free(), but a freed array, a view or another handle's array is an
        error rather than nothing."""
        if not self.ptr:
            why = "the array was already freed"
        elif self._owner is not None:
            why = "cannot free a view (or a model's tensor): free the array (or close the model) owning it"
        elif self.handle is not handle:
            why = "the array belongs to another handle"
        else:
            why = self._unusable()
        if why:
            raise BadArgumentError(f"free: {why}")
        self.free()

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass  # interpreter shutdown or a closed handle: the memory went with the handle
