"""A custom native op from C source: compiled at registration (and cached), run on a stream like
any built-in op. The kernel follows the host kernel contract in dataflow/host_kernel.h: it gets its
arguments as an array of pointers and computes one part of the work; the launch function chooses
how many parts.

    python examples/custom_native_op.py
"""
import numpy as np

import dataflow as df

AXPY = r"""
#include "dataflow/host_kernel.h"

/* y[i] = alpha * x[i] + y[i] over this part's slice */
void axpy(void **args, int part, int num_parts) {
    int64_t n = DATAFLOW_ARG(args, 0, int64_t), begin, end;
    float alpha = DATAFLOW_ARG(args, 1, float);
    const float *x = DATAFLOW_ARG(args, 2, const float *);
    float *y = DATAFLOW_ARG(args, 3, float *);
    dataflow_part_range(n, part, num_parts, 1024, &begin, &end);
    for (int64_t i = begin; i < end; i++) y[i] += alpha * x[i];
}

Dataflow_Status axpy_launch(Dataflow_Handle *h, const Op *op, void *state, Dataflow_Launch_Config *c) {
    (void)h; (void)state;
    c->num_parts = dataflow_elementwise_parts(*(int64_t *)op->op_args[0], 1 << 16);
    return DATAFLOW_OK;
}
"""


def main():
    with df.Handle("host", streams=2) as h:
        axpy = h.register_native_op("axpy", ["int64_scalar", "fp32_scalar", "fp32", "fp32"], source=AXPY,
                                    symbol="axpy", launch="axpy_launch")
        x = np.arange(100_000, dtype=np.float32)
        y = np.ones_like(x)
        dx, dy = h.from_numpy(x), h.from_numpy(y)
        axpy(x.size, 2.0, dx, dy, stream=0)
        result = dy.numpy()  # waits for the stream
        assert np.array_equal(result, 2 * x + 1)
        print(f"axpy (fingerprint {axpy.fingerprint[:16]}...): y[:4] = {result[:4]}")


if __name__ == "__main__":
    main()
