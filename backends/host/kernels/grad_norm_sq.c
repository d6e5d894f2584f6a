/* grad_norm_sq: out = (accumulate ? out : 0) + sum x^2, fp64 accumulation, deterministic.
 * Phase 1 (grad_norm_sq_partials): block b (DATAFLOW_GRAD_NORM_BLOCK elements) sums into 16
 * lane accumulators, acc[k] += x[i]^2 for i = k mod 16 in increasing i, then folds them as
 * k + k+8, k + k+4, k + k+2, k + k+1 into workspace[b]. x^2 of an fp32 is exact in fp64, so
 * the vector body (AVX-512: 2 vectors of 8 lanes, AVX2: 4 of 4) and the scalar loop give the
 * same bits. Parts own whole blocks, so the result does not depend on num_parts.
 * Phase 2 (grad_norm_sq_reduce): one part adds the partials in block order, then into out. */
#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "dataflow/ops.h"
#include "simd_dtype.h"

#define BLOCK DATAFLOW_GRAD_NORM_BLOCK

/* acc[k] += x[i]^2 for i = k mod 16 from i, 16 elements at a time, returns where it stopped.
 * The 16 double lanes are 32 / VL vectors of VL / 2: element i + j of a VL-float load goes to
 * acc[j], its low half widened into one vector and its high half into the next. */
#define BLOCK_VECTOR(isa)                                                                            \
	SIMD_TARGET_##isa static int64_t block_##isa(const void *x, DataflowDatatype dt, int64_t i, int64_t end, \
						     double *acc)                                            \
	{                                                                                            \
		Vd_##isa sums[32 / VL_##isa] = {0};                                                  \
		for (; i + 16 <= end; i += 16)                                                       \
			for (int k = 0; k < 16 / VL_##isa; k++) {                                    \
				Vf_##isa f = vload_##isa(x, i + k * VL_##isa, dt);                   \
				Vd_##isa lo = vwiden_lo_##isa(f), hi = vwiden_hi_##isa(f);           \
				sums[2 * k] = sums[2 * k] + lo * lo; /* exact: fma would agree */    \
				sums[2 * k + 1] = sums[2 * k + 1] + hi * hi;                         \
			}                                                                            \
		memcpy(acc, sums, sizeof(sums));                                                     \
		return i;                                                                            \
	}
SIMD_EACH_ISA(BLOCK_VECTOR)

static double block_sum(const void *x, DataflowDatatype dt, int64_t begin, int64_t end, int level)
{
	double acc[16] = {0};
	int64_t i = begin;
	if (level == SIMD_AVX512)
		i = block_avx512(x, dt, i, end, acc);
	else if (level == SIMD_AVX2)
		i = block_avx2(x, dt, i, end, acc);
	for (; i < end; i++) {
		double v = simd_load1(x, i, dt);
		acc[(i - begin) % 16] += v * v;
	}
	for (int w = 8; w >= 1; w /= 2)
		for (int k = 0; k < w; k++)
			acc[k] += acc[k + w];
	return acc[0];
}

static void partials(void **args, int part, int num_parts, DataflowDatatype dt)
{
	Dataflow_Grad_Norm_Sq_Partials_Args a = dataflow_grad_norm_sq_partials_args(args);
	int64_t n = a.n;
	const void *x = a.x;
	double *ws = a.workspace;
	int64_t b, b_end;
	dataflow_part_range((n + BLOCK - 1) / BLOCK, part, num_parts, 1, &b, &b_end);
	int level = simd_level();
	for (; b < b_end; b++)
		ws[b] = block_sum(x, dt, b * BLOCK, b * BLOCK + BLOCK < n ? b * BLOCK + BLOCK : n, level);
}

void dataflow_host_grad_norm_sq_partials_fp32(void **args, int part, int num_parts)
{
	partials(args, part, num_parts, DATAFLOW_FP32);
}

void dataflow_host_grad_norm_sq_partials_bf16(void **args, int part, int num_parts)
{
	partials(args, part, num_parts, DATAFLOW_BF16);
}

/* at least 4 blocks (128 KiB of fp32) per part */
DATAFLOW_HOST_LAUNCH(dataflow_host_grad_norm_sq_partials_launch, Dataflow_Grad_Norm_Sq_Partials_Args,
		     dataflow_grad_norm_sq_partials_args, dataflow_elementwise_parts((a.n + BLOCK - 1) / BLOCK, 4))

/* (accumulate ? out : 0) + the partials in block order, in double */
static double reduce(const Dataflow_Grad_Norm_Sq_Reduce_Args *a, double out)
{
	double total = 0.0;
	for (int64_t b = 0; b < a->num_blocks; b++)
		total += a->workspace[b];
	return a->accumulate ? out + total : total;
}

#define REDUCE(name, T)                                                                       \
	void dataflow_host_grad_norm_sq_reduce_##name(void **args, int part, int num_parts)  \
	{                                                                                     \
		(void)part;                                                                   \
		(void)num_parts;                                                              \
		Dataflow_Grad_Norm_Sq_Reduce_Args a = dataflow_grad_norm_sq_reduce_args(args); \
		T *out = a.out;                                                               \
		out[0] = (T)reduce(&a, out[0]);                                               \
	}
REDUCE(fp32, float)
REDUCE(fp64, double)

/* One part: the order is the block order. */
DATAFLOW_HOST_ONE_PART_LAUNCH(dataflow_host_grad_norm_sq_reduce_launch)
