"""Device arrays: a pointer into a handle's device memory plus shape and datatype."""
import math

import numpy as np

from . import dtypes
from ._ffi import ffi
from .errors import BadArgumentError


class Array:
    """A block of device memory holding a row-major array.

    Owns its allocation (freed on free() or garbage collection) unless it is a view.
    numpy() waits for all queued work on the handle, then copies back.
    """

    def __init__(self, handle, ptr, shape, dtype, owner=None):
        self.handle = handle
        self.ptr = ptr
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self._owner = owner  # the Array whose allocation this views; None if it owns one

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def nbytes(self):
        return self.size * dtypes.itemsize(self.dtype)

    @property
    def cdata(self):
        return ffi.cast("void *", self.ptr)

    def __repr__(self):
        return f"dataflow.Array(shape={self.shape}, dtype={self.dtype!r}, ptr=0x{self.ptr:x})"

    def view(self, shape=None, offset_elements=0, dtype=None):
        """An array over part of this one's memory (no copy); keeps this one alive."""
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
        """Frees the allocation: invalid at once, reused after the work queued before it finishes."""
        if self._owner is None and self.ptr and self.handle._alive():
            self.handle._free(self.ptr)
        self.ptr = 0

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass  # interpreter shutdown or a closed handle: the memory went with the handle
