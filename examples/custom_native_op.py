"""A custom native op from C source: compiled at registration (and cached), run on a stream like
any built-in op. The source, AXPY_SOURCE, is python/dataflow/data/axpy.c (shipped with the
package): a kernel that follows the host kernel contract in dataflow/host_kernel.h (it gets its
arguments as an array of pointers and computes one part of the work) and a launch function that
checks them and chooses how many parts.

    python examples/custom_native_op.py
"""
import numpy as np

import dataflow as df
from dataflow.custom_ops import AXPY_DTYPES, AXPY_SOURCE


def main():
    with df.Handle("host", streams=2) as h:
        axpy = h.register_native_op("axpy", AXPY_DTYPES, source=AXPY_SOURCE, symbol="axpy", launch="axpy_launch")
        x = np.arange(100_000, dtype=np.float32)
        y = np.ones_like(x)
        dx, dy = h.from_numpy(x), h.from_numpy(y)
        axpy(x.size, 2.0, dx, dy, stream=0)
        result = dy.numpy()  # waits for the stream
        assert np.array_equal(result, 2 * x + 1)
        print(f"axpy (fingerprint {axpy.fingerprint[:16]}...): y[:4] = {result[:4]}")


if __name__ == "__main__":
    main()
