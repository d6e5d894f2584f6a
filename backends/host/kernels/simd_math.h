#ifndef DATAFLOW_HOST_KERNELS_SIMD_MATH_H
#define DATAFLOW_HOST_KERNELS_SIMD_MATH_H

/* fp32 building blocks for kernels that take fp32, fp16 or bf16 tensors (rms_norm, swiglu),
 * each in three forms (AVX-512, AVX2, scalar) that do the same fp32 operations in the same
 * order, so every path gives the same bits:
 *  - load / store / round of elements of a dtype that is a compile-time constant at the call
 *    (the helpers are always inlined, so the dtype branches fold away);
 *  - a 16-lane sum: lane l accumulates elements i = l (mod 16) in order, then the lanes are
 *    added l + 8, l + 4, l + 2, l + 1 (AVX2 holds the 16 lanes in two registers);
 *  - exp for sigmoid (Cephes expf: range reduction by ln 2 in two parts, degree-6
 *    polynomial, about 1 ulp), which gives +Inf above 88.8 and 0 below -86.98;
 *  - SIMD_DTYPE_KERNEL, which instantiates one kernel body per path for a constant dtype
 *    and picks the path at run time.
 * No fma anywhere: the build is ISO C, so the compiler does not contract scalar code. */

#include <math.h>
#include <string.h>

#include "dataflow/datatype.h"
#include "simd.h"

#define SIMD_INLINE inline __attribute__((always_inline))

/* body##_avx512 / _avx2 / _scalar(const Args *, int64_t begin, int64_t end, dtype) become
 * name(const Args *, begin, end) for the dtype, on the best path this CPU runs. */
#define SIMD_DTYPE_KERNEL(name, body, Args, dtype)                                                   \
	SIMD_TARGET_AVX512 static void name##_avx512(const Args *a, int64_t begin, int64_t end)        \
	{                                                                                              \
		body##_avx512(a, begin, end, dtype);                                                   \
	}                                                                                              \
	SIMD_TARGET_AVX2 static void name##_avx2(const Args *a, int64_t begin, int64_t end)            \
	{                                                                                              \
		body##_avx2(a, begin, end, dtype);                                                     \
	}                                                                                              \
	static void name##_scalar(const Args *a, int64_t begin, int64_t end)                          \
	{                                                                                              \
		body##_scalar(a, begin, end, dtype);                                                   \
	}                                                                                              \
	static void name(const Args *a, int64_t begin, int64_t end)                                    \
	{                                                                                              \
		int level = simd_level();                                                              \
		if (level == SIMD_AVX512)                                                              \
			name##_avx512(a, begin, end);                                                  \
		else if (level == SIMD_AVX2)                                                           \
			name##_avx2(a, begin, end);                                                    \
		else                                                                                   \
			name##_scalar(a, begin, end);                                                  \
	}

/* Cephes expf constants */
#define SIMD_EXP_HI 88.8f	  /* above: +Inf (exp overflows past 88.7228 anyway) */
#define SIMD_EXP_LO -86.98f	  /* below: 0 (exp < 2^-125, where 2^(n-1) stops being normal) */
#define SIMD_EXP_LOG2E 1.44269504088896341f
#define SIMD_EXP_ROUND 12582912.0f /* 1.5 * 2^23: adding it rounds to an integer (RNE) */
#define SIMD_EXP_ROUND_BITS 0x4B400000u
#define SIMD_EXP_C1 0.693359375f /* ln 2 = C1 - C2, C1 exact in few bits */
#define SIMD_EXP_C2 -2.12194440e-4f
#define SIMD_EXP_P0 1.9875691500e-4f
#define SIMD_EXP_P1 1.3981999507e-3f
#define SIMD_EXP_P2 8.3334519073e-3f
#define SIMD_EXP_P3 4.1665795894e-2f
#define SIMD_EXP_P4 1.6666665459e-1f
#define SIMD_EXP_P5 5.0000001201e-1f

/* ---- scalar ---- */

static SIMD_INLINE float scalar_load(const void *p, int64_t i, DataflowDatatype dt)
{
	if (dt == DATAFLOW_FP32)
		return ((const float *)p)[i];
	if (dt == DATAFLOW_BF16)
		return dataflow_bf16_to_fp32(((const uint16_t *)p)[i]);
	return dataflow_fp16_to_fp32(((const uint16_t *)p)[i]);
}

static SIMD_INLINE void scalar_store(void *p, int64_t i, float x, DataflowDatatype dt)
{
	if (dt == DATAFLOW_FP32)
		((float *)p)[i] = x;
	else if (dt == DATAFLOW_BF16)
		((uint16_t *)p)[i] = dataflow_fp32_to_bf16(x);
	else
		((uint16_t *)p)[i] = dataflow_fp32_to_fp16(x);
}

/* x rounded to dt (RNE), as fp32 */
static SIMD_INLINE float scalar_round(float x, DataflowDatatype dt)
{
	if (dt == DATAFLOW_FP32)
		return x;
	if (dt == DATAFLOW_BF16)
		return dataflow_bf16_to_fp32(dataflow_fp32_to_bf16(x));
	return dataflow_fp16_to_fp32(dataflow_fp32_to_fp16(x));
}

static SIMD_INLINE float scalar_hsum16(const float a[16])
{
	float s8[8], s4[4], s2[2];
	for (int l = 0; l < 8; l++)
		s8[l] = a[l] + a[l + 8];
	for (int l = 0; l < 4; l++)
		s4[l] = s8[l] + s8[l + 4];
	for (int l = 0; l < 2; l++)
		s2[l] = s4[l] + s4[l + 2];
	return s2[0] + s2[1];
}

/* exp(x) = 2^n * p(r), n = round(x / ln 2), r = x - n ln 2; built as (2p) * 2^(n-1) */
static SIMD_INLINE float scalar_exp(float x)
{
	float t = x * SIMD_EXP_LOG2E + SIMD_EXP_ROUND;
	float n = t - SIMD_EXP_ROUND;
	uint32_t tb, sb;
	memcpy(&tb, &t, sizeof(tb));
	float r = (x - n * SIMD_EXP_C1) - n * SIMD_EXP_C2;
	float p = SIMD_EXP_P0;
	p = p * r + SIMD_EXP_P1;
	p = p * r + SIMD_EXP_P2;
	p = p * r + SIMD_EXP_P3;
	p = p * r + SIMD_EXP_P4;
	p = p * r + SIMD_EXP_P5;
	p = (p * (r * r) + r) + 1.0f;
	sb = (tb - SIMD_EXP_ROUND_BITS + 126u) << 23;
	float s;
	memcpy(&s, &sb, sizeof(s));
	float e = (p + p) * s;
	if (x > SIMD_EXP_HI)
		e = (float)INFINITY;
	if (x < SIMD_EXP_LO)
		e = 0.0f;
	return e; /* NaN in, NaN out: both comparisons are false */
}

/* ---- AVX-512, 16 lanes ---- */

SIMD_TARGET_AVX512 static SIMD_INLINE __m512 simd_load16_avx512(const void *p, int64_t i, DataflowDatatype dt)
{
	if (dt == DATAFLOW_FP32)
		return _mm512_loadu_ps((const float *)p + i);
	if (dt == DATAFLOW_BF16)
		return simd_load_bf16_avx512((const uint16_t *)p + i);
	return simd_load_fp16_avx512((const uint16_t *)p + i);
}

SIMD_TARGET_AVX512 static SIMD_INLINE void simd_store16_avx512(void *p, int64_t i, __m512 x, DataflowDatatype dt)
{
	if (dt == DATAFLOW_FP32)
		_mm512_storeu_ps((float *)p + i, x);
	else if (dt == DATAFLOW_BF16)
		simd_store_bf16_avx512((uint16_t *)p + i, x);
	else
		simd_store_fp16_avx512((uint16_t *)p + i, x);
}

/* bf16: add 0x7fff plus the kept lsb, clear the low half; NaN lanes stay as they are */
SIMD_TARGET_AVX512 static SIMD_INLINE __m512 simd_round16_avx512(__m512 x, DataflowDatatype dt)
{
	if (dt == DATAFLOW_FP32)
		return x;
	if (dt == DATAFLOW_FP16)
		return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	__m512i u = _mm512_castps_si512(x);
	__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	__m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
	r = _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u));
	return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_castsi512_ps(r), x);
}

SIMD_TARGET_AVX512 static SIMD_INLINE float simd_hsum16_avx512(__m512 a)
{
	__m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
	__m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a), hi);
	__m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
	__m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
	return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

SIMD_TARGET_AVX512 static SIMD_INLINE __m512 simd_exp16_avx512(__m512 x)
{
	__m512 t = _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(SIMD_EXP_LOG2E)), _mm512_set1_ps(SIMD_EXP_ROUND));
	__m512 n = _mm512_sub_ps(t, _mm512_set1_ps(SIMD_EXP_ROUND));
	__m512 r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(SIMD_EXP_C1)));
	r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(SIMD_EXP_C2)));
	__m512 p = _mm512_set1_ps(SIMD_EXP_P0);
	p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(SIMD_EXP_P1));
	p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(SIMD_EXP_P2));
	p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(SIMD_EXP_P3));
	p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(SIMD_EXP_P4));
	p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(SIMD_EXP_P5));
	p = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r), _mm512_set1_ps(1.0f));
	__m512i sb = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32((int)SIMD_EXP_ROUND_BITS));
	sb = _mm512_slli_epi32(_mm512_add_epi32(sb, _mm512_set1_epi32(126)), 23);
	__m512 e = _mm512_mul_ps(_mm512_add_ps(p, p), _mm512_castsi512_ps(sb));
	e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(SIMD_EXP_HI), _CMP_GT_OQ), e,
				 _mm512_set1_ps((float)INFINITY));
	return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(SIMD_EXP_LO), _CMP_LT_OQ), e,
				    _mm512_setzero_ps());
}

/* ---- AVX2, 8 lanes ---- */

SIMD_TARGET_AVX2 static SIMD_INLINE __m256 simd_load8_avx2(const void *p, int64_t i, DataflowDatatype dt)
{
	if (dt == DATAFLOW_FP32)
		return _mm256_loadu_ps((const float *)p + i);
	if (dt == DATAFLOW_BF16)
		return simd_load_bf16_avx2((const uint16_t *)p + i);
	return simd_load_fp16_avx2((const uint16_t *)p + i);
}

SIMD_TARGET_AVX2 static SIMD_INLINE void simd_store8_avx2(void *p, int64_t i, __m256 x, DataflowDatatype dt)
{
	if (dt == DATAFLOW_FP32)
		_mm256_storeu_ps((float *)p + i, x);
	else if (dt == DATAFLOW_BF16)
		simd_store_bf16_avx2((uint16_t *)p + i, x);
	else
		simd_store_fp16_avx2((uint16_t *)p + i, x);
}

SIMD_TARGET_AVX2 static SIMD_INLINE __m256 simd_round8_avx2(__m256 x, DataflowDatatype dt)
{
	if (dt == DATAFLOW_FP32)
		return x;
	if (dt == DATAFLOW_FP16)
		return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	__m256i u = _mm256_castps_si256(x);
	__m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
	__m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
	r = _mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u));
	return _mm256_blendv_ps(_mm256_castsi256_ps(r), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* lanes 0-7 in lo, 8-15 in hi */
SIMD_TARGET_AVX2 static SIMD_INLINE float simd_hsum16_avx2(__m256 lo, __m256 hi)
{
	__m256 s8 = _mm256_add_ps(lo, hi);
	__m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
	__m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
	return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

SIMD_TARGET_AVX2 static SIMD_INLINE __m256 simd_exp8_avx2(__m256 x)
{
	__m256 t = _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(SIMD_EXP_LOG2E)), _mm256_set1_ps(SIMD_EXP_ROUND));
	__m256 n = _mm256_sub_ps(t, _mm256_set1_ps(SIMD_EXP_ROUND));
	__m256 r = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(SIMD_EXP_C1)));
	r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(SIMD_EXP_C2)));
	__m256 p = _mm256_set1_ps(SIMD_EXP_P0);
	p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(SIMD_EXP_P1));
	p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(SIMD_EXP_P2));
	p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(SIMD_EXP_P3));
	p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(SIMD_EXP_P4));
	p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(SIMD_EXP_P5));
	p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
	__m256i sb = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32((int)SIMD_EXP_ROUND_BITS));
	sb = _mm256_slli_epi32(_mm256_add_epi32(sb, _mm256_set1_epi32(126)), 23);
	__m256 e = _mm256_mul_ps(_mm256_add_ps(p, p), _mm256_castsi256_ps(sb));
	e = _mm256_blendv_ps(e, _mm256_set1_ps((float)INFINITY),
			     _mm256_cmp_ps(x, _mm256_set1_ps(SIMD_EXP_HI), _CMP_GT_OQ));
	return _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(SIMD_EXP_LO), _CMP_LT_OQ));
}

#endif
