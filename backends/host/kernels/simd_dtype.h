#ifndef DATAFLOW_HOST_KERNELS_SIMD_DTYPE_H
#define DATAFLOW_HOST_KERNELS_SIMD_DTYPE_H

/* Loads/stores/rounding of fp32, bf16 or fp16 elements as fp32, for kernels that keep one
 * body for every float dtype: the body is always_inline and called with a constant dtype, so
 * each instance compiles to straight simd.h conversions with no branch in the loop. */

#include "dataflow/datatype.h"
#include "dataflow/host_kernel.h"
#include "simd.h"

#define SIMD_INLINE __attribute__((always_inline)) static inline

SIMD_INLINE float simd_load1(const void *p, int64_t i, DataflowDatatype dt)
{
	if (dt == DATAFLOW_BF16)
		return dataflow_bf16_to_fp32(((const uint16_t *)p)[i]);
	if (dt == DATAFLOW_FP16)
		return dataflow_fp16_to_fp32(((const uint16_t *)p)[i]);
	return ((const float *)p)[i];
}

SIMD_INLINE void simd_store1(void *p, int64_t i, float x, DataflowDatatype dt)
{
	if (dt == DATAFLOW_BF16)
		((uint16_t *)p)[i] = dataflow_fp32_to_bf16(x);
	else if (dt == DATAFLOW_FP16)
		((uint16_t *)p)[i] = dataflow_fp32_to_fp16(x);
	else
		((float *)p)[i] = x;
}

SIMD_TARGET_AVX512 SIMD_INLINE __m512 simd_load16_avx512(const void *p, int64_t i, DataflowDatatype dt)
{
	if (dt == DATAFLOW_BF16)
		return simd_load_bf16_avx512((const uint16_t *)p + i);
	if (dt == DATAFLOW_FP16)
		return simd_load_fp16_avx512((const uint16_t *)p + i);
	return _mm512_loadu_ps((const float *)p + i);
}

SIMD_TARGET_AVX512 SIMD_INLINE void simd_store16_avx512(void *p, int64_t i, __m512 x, DataflowDatatype dt)
{
	if (dt == DATAFLOW_BF16)
		simd_store_bf16_avx512((uint16_t *)p + i, x);
	else if (dt == DATAFLOW_FP16)
		simd_store_fp16_avx512((uint16_t *)p + i, x);
	else
		_mm512_storeu_ps((float *)p + i, x);
}

SIMD_TARGET_AVX2 SIMD_INLINE __m256 simd_load8_avx2(const void *p, int64_t i, DataflowDatatype dt)
{
	if (dt == DATAFLOW_BF16)
		return simd_load_bf16_avx2((const uint16_t *)p + i);
	if (dt == DATAFLOW_FP16)
		return simd_load_fp16_avx2((const uint16_t *)p + i);
	return _mm256_loadu_ps((const float *)p + i);
}

SIMD_TARGET_AVX2 SIMD_INLINE void simd_store8_avx2(void *p, int64_t i, __m256 x, DataflowDatatype dt)
{
	if (dt == DATAFLOW_BF16)
		simd_store_bf16_avx2((uint16_t *)p + i, x);
	else if (dt == DATAFLOW_FP16)
		simd_store_fp16_avx2((uint16_t *)p + i, x);
	else
		_mm256_storeu_ps((float *)p + i, x);
}

/* x rounded to dt (RNE) and widened back, in registers: the value a store and reload would
 * give (for bf16, add 0x7fff plus the kept lsb and clear the low half; NaN stays NaN). */
SIMD_INLINE float simd_round1(float x, DataflowDatatype dt)
{
	if (dt == DATAFLOW_BF16)
		return dataflow_bf16_to_fp32(dataflow_fp32_to_bf16(x));
	if (dt == DATAFLOW_FP16)
		return dataflow_fp16_to_fp32(dataflow_fp32_to_fp16(x));
	return x;
}

SIMD_TARGET_AVX512 SIMD_INLINE __m512 simd_round16_avx512(__m512 x, DataflowDatatype dt)
{
	if (dt == DATAFLOW_FP16)
		return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	if (dt != DATAFLOW_BF16)
		return x;
	__m512i u = _mm512_castps_si512(x);
	__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	__m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
	r = _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u));
	return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_castsi512_ps(r), x);
}

SIMD_TARGET_AVX2 SIMD_INLINE __m256 simd_round8_avx2(__m256 x, DataflowDatatype dt)
{
	if (dt == DATAFLOW_FP16)
		return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	if (dt != DATAFLOW_BF16)
		return x;
	__m256i u = _mm256_castps_si256(x);
	__m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
	__m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
	r = _mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u));
	return _mm256_blendv_ps(_mm256_castsi256_ps(r), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* One kernel body per path for a constant dtype: from body##_avx512 / _avx2 / _scalar
 * (const Args *, int64_t begin, int64_t end, DataflowDatatype), defines
 * name(const Args *, begin, end), which runs the best path this CPU (and DATAFLOW_SIMD) allows. */
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
		SIMD_DISPATCH(name, a, begin, end);                                                    \
	}

/* Defines the host kernel `kernel`: unpacks its arguments into `Args a` with unpack, takes
 * this part's share of [0, count) (count: an expression over a) in multiples of align, and runs
 * `run` (a SIMD_DTYPE_KERNEL) over it. */
#define SIMD_DTYPE_ENTRY(kernel, run, Args, unpack, count, align)                                    \
	void kernel(void **args, int part, int num_parts)                                            \
	{                                                                                            \
		int64_t begin_, end_;                                                                \
		Args a = unpack(args);                                                               \
		dataflow_part_range(count, part, num_parts, align, &begin_, &end_);                  \
		run(&a, begin_, end_);                                                               \
	}

#endif
