#ifndef DATAFLOW_HOST_KERNEL_H
#define DATAFLOW_HOST_KERNEL_H

/* Helpers for writing host-backend native kernels:
 *   void kernel(void **args, int part, int num_parts)
 * is called once per part (parts run concurrently on the handle's compute threads);
 * args[i] points to the value of argument i (for a tensor, to its device pointer). */

#include <stdint.h>

#include "dataflow/op_impl.h"

#define DATAFLOW_ARG(args, i, type) (*(type *)(args)[i])

/* How many compute threads the host handle runs kernels' parts on (its "threads" option): for
 * external ops that parallelize themselves (the matmul). Exported by libdataflow_host. */
int dataflow_host_compute_threads(Dataflow_Handle *handle);

/* The instruction set oneDNN's kernels run on this CPU (after ONEDNN_MAX_CPU_ISA), e.g.
 * "avx512_core_bf16"; "" in a build without oneDNN. It decides the host matmul's summation
 * order, so test reports print it. Exported by libdataflow_host_ops. */
const char *dataflow_host_onednn_isa(void);

/* Splits [0, n) into num_parts contiguous ranges whose boundaries are multiples of align
 * (except the end) and returns part's range in [*begin, *end). */
static inline void dataflow_part_range(int64_t n, int part, int num_parts, int64_t align, int64_t *begin,
				       int64_t *end)
{
	int64_t blocks = (n + align - 1) / align;
	int64_t b0 = blocks * part / num_parts;
	int64_t b1 = blocks * (part + 1) / num_parts;
	*begin = b0 * align < n ? b0 * align : n;
	*end = b1 * align < n ? b1 * align : n;
}

/* How many parts an elementwise kernel over n elements should use: enough to keep every
 * compute thread busy, none smaller than min_per_part elements. */
static inline int dataflow_elementwise_parts(int64_t n, int64_t min_per_part)
{
	int64_t parts = n / (min_per_part > 0 ? min_per_part : 1);
	if (parts < 1)
		parts = 1;
	if (parts > 256)
		parts = 256;
	return (int)parts;
}

/* Defines the kernels dataflow_host_<op>_fp32, _bf16 and _fp16 of a body
 * run(void **args, int part, int num_parts, dtype) given the dtype constant of each. */
#define DATAFLOW_HOST_FLOAT_KERNELS(op, run, fp32, bf16, fp16)                                         \
	void dataflow_host_##op##_fp32(void **args, int part, int num_parts)                          \
	{                                                                                             \
		run(args, part, num_parts, fp32);                                                     \
	}                                                                                             \
	void dataflow_host_##op##_bf16(void **args, int part, int num_parts)                          \
	{                                                                                             \
		run(args, part, num_parts, bf16);                                                     \
	}                                                                                             \
	void dataflow_host_##op##_fp16(void **args, int part, int num_parts)                          \
	{                                                                                             \
		run(args, part, num_parts, fp16);                                                     \
	}

/* parts, or most if that is fewer (most >= 1) */
static inline int dataflow_parts_at_most(int parts, int64_t most)
{
	return parts < most ? parts : (int)most;
}

/* Defines the launch function `name` of an op that chooses only its number of parts: with
 * `Args a = unpack(op->op_args)` (unpack as dataflow/op_args.h's dataflow_<op>_args), parts is
 * an int expression that may use a and op. It checks nothing: sizes and tensors are the op's
 * signature's to require (dataflow/op_signature.h), and dataflow_submit_op checked them. */
#define DATAFLOW_HOST_LAUNCH(name, Args, unpack, parts)                                               \
	Dataflow_Status name(Dataflow_Handle *handle, const Op *op, void *op_state, Dataflow_Launch_Config *config) \
	{                                                                                             \
		(void)handle;                                                                         \
		(void)op_state;                                                                       \
		Args a = unpack(op->op_args);                                                         \
		config->num_parts = (parts);                                                          \
		return DATAFLOW_OK;                                                                   \
	}

/* The launch function of an elementwise op whose arguments hold its element count n: parts of
 * at least min_per_part elements (an expression that may use op). */
#define DATAFLOW_HOST_ELEMENTWISE_LAUNCH(name, Args, unpack, min_per_part)                            \
	DATAFLOW_HOST_LAUNCH(name, Args, unpack, dataflow_elementwise_parts(a.n, min_per_part))

/* Defines the launch function `name` of an op whose kernel runs as one part (a reduction
 * whose order must not depend on the thread count, or too little work to split). */
#define DATAFLOW_HOST_ONE_PART_LAUNCH(name)                                                           \
	Dataflow_Status name(Dataflow_Handle *handle, const Op *op, void *op_state, Dataflow_Launch_Config *config) \
	{                                                                                             \
		(void)handle;                                                                         \
		(void)op;                                                                             \
		(void)op_state;                                                                       \
		config->num_parts = 1;                                                                \
		return DATAFLOW_OK;                                                                   \
	}

#endif
