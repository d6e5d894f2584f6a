"""A custom external op from Python: a callable that the handle runs on a stream worker, ordered with
the other work on that stream, here a numpy function applied to device memory in place.

    python examples/custom_external_op.py
"""
import numpy as np

import dataflow as df


def main():
    with df.Handle("host", streams=2) as h:
        x = h.from_numpy(np.linspace(-3, 3, 7, dtype=np.float32))

        def relu_in_place(ptr):
            view = h.host_view(ptr, x.shape, "fp32")  # the host backend's device memory, as numpy
            np.maximum(view, 0, out=view)

        relu = h.register_external_op("relu_inplace", ["fp32"], relu_in_place)
        df.ops.add(h, x, x, alpha=2.0, beta=0.0, out=x, stream=0)  # x = 2x, then the Python op on the same stream
        relu(x, stream=0)
        print("relu(2x) =", x.numpy())
        assert np.array_equal(x.numpy(), np.maximum(2 * np.linspace(-3, 3, 7, dtype=np.float32), 0))


if __name__ == "__main__":
    main()
