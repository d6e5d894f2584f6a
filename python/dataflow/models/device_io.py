"""Reading device results back: one outbound transfer, one sync of the stream that wrote them."""
import numpy as np

from .. import dtypes


def fetch(array, stream):
    """A device array's values as numpy after ONE sync of `stream` (the work that wrote it
    must be on that stream)."""
    out = np.empty(array.shape, dtype=dtypes.STORAGE[array.dtype])
    array.handle.outbound_transfer(out, array, stream=stream)
    array.handle.sync(stream)
    return dtypes.decode(out, array.dtype)
