/* grad_norm_sq: out = (accumulate ? out : 0) + sum x^2, fp64 accumulation, deterministic.
 * Phase 1 (grad_norm_sq_partials): block b (DATAFLOW_GRAD_NORM_BLOCK elements) sums into 16
 * lane accumulators, acc[k] += x[i]^2 for i = k mod 16 in increasing i, then folds them as
 * k + k+8, k + k+4, k + k+2, k + k+1 into workspace[b]. x^2 of an fp32 is exact in fp64, so
 * fma and mul+add agree and the AVX-512 (2 x 8 lanes), AVX2 (4 x 4 lanes) and scalar paths
 * give the same bits. Parts own whole blocks, so the result does not depend on num_parts.
 * Phase 2 (grad_norm_sq_reduce): one part adds the partials in block order, then into out. */
#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "dataflow/ops.h"
#include "simd.h"

#define BLOCK DATAFLOW_GRAD_NORM_BLOCK

SIMD_TARGET_AVX512 static int64_t block_avx512(const void *x, int bf16, int64_t i, int64_t end, double *acc)
{
	__m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
	for (; i + 16 <= end; i += 16) {
		__m512 f = bf16 ? simd_load_bf16_avx512((const uint16_t *)x + i) : _mm512_loadu_ps((const float *)x + i);
		__m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
		__m512d b = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
		lo = _mm512_fmadd_pd(a, a, lo);
		hi = _mm512_fmadd_pd(b, b, hi);
	}
	_mm512_storeu_pd(acc, lo);
	_mm512_storeu_pd(acc + 8, hi);
	return i;
}

SIMD_TARGET_AVX2 static int64_t block_avx2(const void *x, int bf16, int64_t i, int64_t end, double *acc)
{
	__m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
	for (; i + 16 <= end; i += 16) {
		__m256 f0 = bf16 ? simd_load_bf16_avx2((const uint16_t *)x + i) : _mm256_loadu_ps((const float *)x + i);
		__m256 f1 = bf16 ? simd_load_bf16_avx2((const uint16_t *)x + i + 8)
				 : _mm256_loadu_ps((const float *)x + i + 8);
		__m256d d0 = _mm256_cvtps_pd(_mm256_castps256_ps128(f0)), d1 = _mm256_cvtps_pd(_mm256_extractf128_ps(f0, 1));
		__m256d d2 = _mm256_cvtps_pd(_mm256_castps256_ps128(f1)), d3 = _mm256_cvtps_pd(_mm256_extractf128_ps(f1, 1));
		a0 = _mm256_fmadd_pd(d0, d0, a0);
		a1 = _mm256_fmadd_pd(d1, d1, a1);
		a2 = _mm256_fmadd_pd(d2, d2, a2);
		a3 = _mm256_fmadd_pd(d3, d3, a3);
	}
	_mm256_storeu_pd(acc, a0);
	_mm256_storeu_pd(acc + 4, a1);
	_mm256_storeu_pd(acc + 8, a2);
	_mm256_storeu_pd(acc + 12, a3);
	return i;
}

static double block_sum(const void *x, int bf16, int64_t begin, int64_t end, int level)
{
	double acc[16] = {0};
	int64_t i = begin;
	if (level == SIMD_AVX512)
		i = block_avx512(x, bf16, i, end, acc);
	else if (level == SIMD_AVX2)
		i = block_avx2(x, bf16, i, end, acc);
	for (; i < end; i++) {
		double v = bf16 ? dataflow_bf16_to_fp32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
		acc[(i - begin) % 16] += v * v;
	}
	for (int w = 8; w >= 1; w /= 2)
		for (int k = 0; k < w; k++)
			acc[k] += acc[k + w];
	return acc[0];
}

static void partials(void **args, int part, int num_parts, int bf16)
{
	Dataflow_Grad_Norm_Sq_Partials_Args a = dataflow_grad_norm_sq_partials_args(args);
	int64_t n = a.n;
	const void *x = a.x;
	double *ws = a.workspace;
	int64_t b, b_end;
	dataflow_part_range((n + BLOCK - 1) / BLOCK, part, num_parts, 1, &b, &b_end);
	int level = simd_level();
	for (; b < b_end; b++)
		ws[b] = block_sum(x, bf16, b * BLOCK, b * BLOCK + BLOCK < n ? b * BLOCK + BLOCK : n, level);
}

void dataflow_host_grad_norm_sq_partials_fp32(void **args, int part, int num_parts)
{
	partials(args, part, num_parts, 0);
}

void dataflow_host_grad_norm_sq_partials_bf16(void **args, int part, int num_parts)
{
	partials(args, part, num_parts, 1);
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
