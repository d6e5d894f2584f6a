#ifndef DATAFLOW_HOST_KERNELS_SIMD_DTYPE_H
#define DATAFLOW_HOST_KERNELS_SIMD_DTYPE_H

/* Loads/stores of fp32, bf16 or fp16 elements as fp32, for kernels that keep one body for
 * every float dtype: the body is always_inline and called with a constant dtype, so each
 * instance compiles to straight simd.h conversions with no branch in the loop. */

#include "dataflow/datatype.h"
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

#endif
