"""A user op written in C (axpy) that the custom-op and op-check tests register."""


AXPY_SOURCE = r"""
#include "dataflow/host_kernel.h"
/* y[i] += a * x[i] */
void axpy(void **args, int part, int num_parts) {
    int64_t n = DATAFLOW_ARG(args, 0, int64_t), lo, hi;
    float a = DATAFLOW_ARG(args, 1, float);
    const float *x = DATAFLOW_ARG(args, 2, const float *);
    float *y = DATAFLOW_ARG(args, 3, float *);
    dataflow_part_range(n, part, num_parts, 64, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) y[i] += a * x[i];
}
Dataflow_Status axpy_launch(Dataflow_Handle *h, const Op *op, void *state, Dataflow_Launch_Config *c) {
    (void)h; (void)state;
    int64_t n = *(int64_t *)op->op_args[0];
    if (n < 0) return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "axpy: n must be >= 0, got %lld", (long long)n);
    c->num_parts = dataflow_elementwise_parts(n, 256);
    return DATAFLOW_OK;
}
"""


AXPY_DTYPES = ["int64_scalar", "fp32_scalar", "fp32", "fp32"]
