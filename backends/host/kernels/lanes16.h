#ifndef DATAFLOW_HOST_KERNELS_LANES16_H
#define DATAFLOW_HOST_KERNELS_LANES16_H

/* The summation order that host dot-product kernels (qmatmul.c, matvec.c) share, so that a
 * result does not depend on the ISA: lane l = k mod 16 of a 16-lane fp32 accumulator takes
 * fma(x[k], w[k], acc[l]) in k order (AVX-512: one vector, AVX2: two of 8, scalar: 16 floats),
 * then the lanes are summed in a fixed pairwise tree. Also the scalar path's vocabulary, named
 * as simd.h names the vector ones, so that one ISA-stamped body also stamps the scalar path. */

#include <math.h>
#include <string.h>

#include "simd_dtype.h"

#define LANES 16

/* ---- the scalar path's vocabulary, so the one body below also stamps it ---- */

enum { VL_scalar = 1 };
typedef float Vf_scalar;
SIMD_INLINE float vset1_scalar(float v)
{
	return v;
}
SIMD_INLINE float vloadf_scalar(const float *p)
{
	return *p;
}
SIMD_INLINE void vstoref_scalar(float *p, float v)
{
	*p = v;
}
SIMD_INLINE float vfma_scalar(float a, float b, float c)
{
	return fmaf(a, b, c);
}
SIMD_INLINE float vload_scalar(const void *p, int64_t i, DataflowDatatype dt)
{
	return simd_load1(p, i, dt);
}

/* The fixed pairwise sum of the 16 lanes: lanes[i] += lanes[i + w] for w = 8, 4, 2, 1 */
SIMD_INLINE float tree16(float lanes[LANES])
{
	for (int width = LANES / 2; width >= 1; width /= 2)
		for (int i = 0; i < width; i++)
			lanes[i] += lanes[i + width];
	return lanes[0];
}

/* tree16 of the 16 lanes in registers, the same additions in the same order (used when K has no
 * tail): the upper 8 onto the lower 8, then 4, 2, 1 */
SIMD_TARGET_AVX512 SIMD_INLINE float hsum16_avx512(const __m512 *acc)
{
	__m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(acc[0]),
				  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[0]), 1)));
	__m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
	__m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
	return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

SIMD_TARGET_AVX2 SIMD_INLINE float hsum16_avx2(const __m256 *acc)
{
	__m256 s8 = _mm256_add_ps(acc[0], acc[1]);
	__m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
	__m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
	return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

SIMD_INLINE float hsum16_scalar(const float *acc)
{
	float lanes[LANES];
	memcpy(lanes, acc, sizeof(lanes));
	return tree16(lanes);
}

#endif
