/* A user op in C, y[i] += a * x[i]: what `dataflow demo` runs, examples/custom_native_op.py shows
 * and the custom-op tests register (dataflow.custom_ops.AXPY_SOURCE). The kernel follows the host
 * kernel contract in dataflow/host_kernel.h: its arguments come as an array of pointers, and it
 * computes one part of the work; the launch function checks them and chooses how many parts. */
#include "dataflow/host_kernel.h"

void axpy(void **args, int part, int num_parts)
{
	int64_t n = DATAFLOW_ARG(args, 0, int64_t), begin, end;
	float a = DATAFLOW_ARG(args, 1, float);
	const float *x = DATAFLOW_ARG(args, 2, const float *);
	float *y = DATAFLOW_ARG(args, 3, float *);
	dataflow_part_range(n, part, num_parts, 64, &begin, &end);
	for (int64_t i = begin; i < end; i++)
		y[i] += a * x[i];
}

Dataflow_Status axpy_launch(Dataflow_Handle *h, const Op *op, void *state, Dataflow_Launch_Config *c)
{
	(void)h;
	(void)state;
	int64_t n = *(int64_t *)op->op_args[0];
	if (n < 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "axpy: n must be >= 0, got %lld", (long long)n);
	c->num_parts = dataflow_elementwise_parts(n, 256);
	return DATAFLOW_OK;
}
