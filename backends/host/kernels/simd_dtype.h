#ifndef DATAFLOW_HOST_KERNELS_SIMD_DTYPE_H
#define DATAFLOW_HOST_KERNELS_SIMD_DTYPE_H

/* Loads/stores/rounding of fp32, bf16 or fp16 elements as fp32, for kernels that keep one
 * body for every float dtype: the body is always_inline and called with a constant dtype, so
 * each instance compiles to straight simd.h conversions with no branch in the loop. The
 * vector body itself is one per ISA too (SIMD_EACH_ISA, simd.h). */

#include "dataflow/datatype.h"
#include "dataflow/host_kernel.h"
#include "simd.h"

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

/* The vector forms, per ISA (simd.h): elements [i, i + VL) of p as fp32, stored back, and
 * simd_round1 of every lane. */
#define SIMD_DTYPE_OPS(isa)                                                                          \
	SIMD_ISA_INLINE(isa) Vf_##isa vload_##isa(const void *p, int64_t i, DataflowDatatype dt)          \
	{                                                                                            \
		if (dt == DATAFLOW_BF16)                                                             \
			return simd_load_bf16_##isa((const uint16_t *)p + i);                        \
		if (dt == DATAFLOW_FP16)                                                             \
			return simd_load_fp16_##isa((const uint16_t *)p + i);                        \
		return vloadf_##isa((const float *)p + i);                                           \
	}                                                                                            \
	SIMD_ISA_INLINE(isa) void vstore_##isa(void *p, int64_t i, Vf_##isa x, DataflowDatatype dt)       \
	{                                                                                            \
		if (dt == DATAFLOW_BF16)                                                             \
			simd_store_bf16_##isa((uint16_t *)p + i, x);                                 \
		else if (dt == DATAFLOW_FP16)                                                        \
			simd_store_fp16_##isa((uint16_t *)p + i, x);                                 \
		else                                                                                 \
			vstoref_##isa((float *)p + i, x);                                            \
	}                                                                                            \
	SIMD_ISA_INLINE(isa) Vf_##isa vround_##isa(Vf_##isa x, DataflowDatatype dt)                      \
	{                                                                                            \
		if (dt == DATAFLOW_FP16)                                                             \
			return vround_fp16_##isa(x);                                                 \
		if (dt != DATAFLOW_BF16)                                                             \
			return x;                                                                    \
		Vu_##isa u = (Vu_##isa)x;                                                            \
		Vu_##isa r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;                         \
		return vselect_##isa(vcmp_##isa(x, x, _CMP_UNORD_Q), x, (Vf_##isa)r);                \
	}

SIMD_EACH_ISA(SIMD_DTYPE_OPS)

/* One kernel body per path for a constant dtype: from body##_avx512 / _avx2 / _scalar
 * (const Args *, int64_t begin, int64_t end, DataflowDatatype), defines
 * name(const Args *, begin, end), which runs the best path this CPU (and DATAFLOW_SIMD) allows. */
#define SIMD_DTYPE_PATH(isa, name, body, Args, dtype)                                                \
	SIMD_TARGET_##isa static void name##_##isa(const Args *a, int64_t begin, int64_t end)          \
	{                                                                                              \
		body##_##isa(a, begin, end, dtype);                                                    \
	}
#define SIMD_DTYPE_KERNEL(name, body, Args, dtype)                                                   \
	SIMD_DTYPE_PATH(avx512, name, body, Args, dtype)                                             \
	SIMD_DTYPE_PATH(avx2, name, body, Args, dtype)                                               \
	SIMD_DTYPE_PATH(scalar, name, body, Args, dtype)                                             \
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
