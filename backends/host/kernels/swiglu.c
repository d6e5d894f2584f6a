/* swiglu forward and backward, elementwise in fp32. The sigmoid takes e = exp(-|g|) (the
 * exp of simd_exp.h, which never overflows), s = (g < 0 ? e : 1) / (1 + e):
 *   forward:  silu = (g < 0 ? g * e : g) / (1 + e)   (for g >= 0 torch's g / (1 + exp(-g)))
 *             out = to_dtype(to_dtype(silu) * up)
 *             silu rounded to the dtype before the multiply, as F.silu(gate) * up in
 *             bf16/fp16 (Hugging Face LlamaMLP).
 *   backward: d_up = d_out * silu,  d_gate = ((d_out * up) * s) * (1 + g * (1 - s)),
 *             each rounded once.
 * Each element's inputs are read before its outputs are written, so outputs may alias
 * inputs. Every path does the same fp32 operations, so gives the same bits. */
#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "simd_dtype.h"
#include "simd_exp.h"

/* parts are multiples of 64 elements (whole cache lines) and at least 32 KiB of output */
#define PART_ALIGN 64
#define PART_MIN_BYTES 32768

/* exp(-|g|): the sign bit set, then simd_exp.h */
SIMD_TARGET_AVX512 SIMD_INLINE __m512 exp_neg_abs_avx512(__m512 g)
{
	__m512i sign = _mm512_set1_epi32((int)0x80000000u);
	return simd_exp_nonpos_avx512(_mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(g), sign)));
}

SIMD_TARGET_AVX2 SIMD_INLINE __m256 exp_neg_abs_avx2(__m256 g)
{
	return simd_exp_nonpos_avx2(_mm256_or_ps(g, _mm256_set1_ps(-0.0f)));
}

/* ---- forward ---- */

typedef Dataflow_Swiglu_Args Swiglu_Args;

SIMD_INLINE void swiglu_scalar(const Swiglu_Args *a, int64_t i, int64_t end, DataflowDatatype dt)
{
	for (; i < end; i++) {
		float g = simd_load1(a->gate, i, dt), e = simd_exp_nonpos(-fabsf(g));
		float act = simd_round1((g < 0.0f ? g * e : g) / (1.0f + e), dt);
		simd_store1(a->out, i, act * simd_load1(a->up, i, dt), dt);
	}
}

SIMD_TARGET_AVX512 SIMD_INLINE void swiglu_avx512(const Swiglu_Args *a, int64_t i, int64_t end,
							 DataflowDatatype dt)
{
	for (; i + 16 <= end; i += 16) {
		__m512 g = simd_load16_avx512(a->gate, i, dt), e = exp_neg_abs_avx512(g);
		__m512 n = _mm512_mask_mul_ps(g, _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ), g, e);
		__m512 act = simd_round16_avx512(_mm512_div_ps(n, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), dt);
		simd_store16_avx512(a->out, i, _mm512_mul_ps(act, simd_load16_avx512(a->up, i, dt)), dt);
	}
	swiglu_scalar(a, i, end, dt); /* the tail */
}

SIMD_TARGET_AVX2 SIMD_INLINE void swiglu_avx2(const Swiglu_Args *a, int64_t i, int64_t end,
						     DataflowDatatype dt)
{
	for (; i + 8 <= end; i += 8) {
		__m256 g = simd_load8_avx2(a->gate, i, dt), e = exp_neg_abs_avx2(g);
		__m256 n = _mm256_blendv_ps(g, _mm256_mul_ps(g, e), _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ));
		__m256 act = simd_round8_avx2(_mm256_div_ps(n, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), dt);
		simd_store8_avx2(a->out, i, _mm256_mul_ps(act, simd_load8_avx2(a->up, i, dt)), dt);
	}
	swiglu_scalar(a, i, end, dt); /* the tail */
}

/* ---- backward ---- */

typedef Dataflow_Swiglu_Bwd_Args Swiglu_Bwd_Args;

SIMD_INLINE void swiglu_bwd_scalar(const Swiglu_Bwd_Args *a, int64_t i, int64_t end, DataflowDatatype dt)
{
	for (; i < end; i++) {
		float dout = simd_load1(a->d_out, i, dt), g = simd_load1(a->gate, i, dt), u = simd_load1(a->up, i, dt);
		float e = simd_exp_nonpos(-fabsf(g)), d = 1.0f + e;
		float s = (g < 0.0f ? e : 1.0f) / d, silu = (g < 0.0f ? g * e : g) / d;
		float dg = ((dout * u) * s) * (1.0f + g * (1.0f - s)), du = dout * silu;
		simd_store1(a->d_gate, i, dg, dt);
		simd_store1(a->d_up, i, du, dt);
	}
}

SIMD_TARGET_AVX512 SIMD_INLINE void swiglu_bwd_avx512(const Swiglu_Bwd_Args *a, int64_t i, int64_t end,
							     DataflowDatatype dt)
{
	__m512 one = _mm512_set1_ps(1.0f);
	for (; i + 16 <= end; i += 16) {
		__m512 dout = simd_load16_avx512(a->d_out, i, dt), g = simd_load16_avx512(a->gate, i, dt);
		__m512 u = simd_load16_avx512(a->up, i, dt);
		__m512 e = exp_neg_abs_avx512(g), d = _mm512_add_ps(one, e);
		__mmask16 neg = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ);
		__m512 s = _mm512_div_ps(_mm512_mask_blend_ps(neg, one, e), d);
		__m512 silu = _mm512_div_ps(_mm512_mask_mul_ps(g, neg, g, e), d);
		__m512 dsilu = _mm512_add_ps(one, _mm512_mul_ps(g, _mm512_sub_ps(one, s)));
		__m512 dg = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dout, u), s), dsilu);
		__m512 du = _mm512_mul_ps(dout, silu);
		simd_store16_avx512(a->d_gate, i, dg, dt);
		simd_store16_avx512(a->d_up, i, du, dt);
	}
	swiglu_bwd_scalar(a, i, end, dt); /* the tail */
}

SIMD_TARGET_AVX2 SIMD_INLINE void swiglu_bwd_avx2(const Swiglu_Bwd_Args *a, int64_t i, int64_t end,
							 DataflowDatatype dt)
{
	__m256 one = _mm256_set1_ps(1.0f);
	for (; i + 8 <= end; i += 8) {
		__m256 dout = simd_load8_avx2(a->d_out, i, dt), g = simd_load8_avx2(a->gate, i, dt);
		__m256 u = simd_load8_avx2(a->up, i, dt);
		__m256 e = exp_neg_abs_avx2(g), d = _mm256_add_ps(one, e);
		__m256 neg = _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ);
		__m256 s = _mm256_div_ps(_mm256_blendv_ps(one, e, neg), d);
		__m256 silu = _mm256_div_ps(_mm256_blendv_ps(g, _mm256_mul_ps(g, e), neg), d);
		__m256 dsilu = _mm256_add_ps(one, _mm256_mul_ps(g, _mm256_sub_ps(one, s)));
		__m256 dg = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(dout, u), s), dsilu);
		__m256 du = _mm256_mul_ps(dout, silu);
		simd_store8_avx2(a->d_gate, i, dg, dt);
		simd_store8_avx2(a->d_up, i, du, dt);
	}
	swiglu_bwd_scalar(a, i, end, dt); /* the tail */
}

/* ---- entry points: elementwise ranges of rows * ffn ---- */

#define SWIGLU_KERNELS(name, DT)                                                                          \
	SIMD_DTYPE_KERNEL(swiglu_##name, swiglu, Swiglu_Args, DT)                                         \
	SIMD_DTYPE_KERNEL(swiglu_bwd_##name, swiglu_bwd, Swiglu_Bwd_Args, DT)                             \
	SIMD_DTYPE_ENTRY(dataflow_host_swiglu_##name, swiglu_##name, Swiglu_Args, dataflow_swiglu_args,           \
			 a.rows * a.ffn, PART_ALIGN)                                                      \
	SIMD_DTYPE_ENTRY(dataflow_host_swiglu_bwd_##name, swiglu_bwd_##name, Swiglu_Bwd_Args,                     \
			 dataflow_swiglu_bwd_args, a.rows * a.ffn, PART_ALIGN)

SWIGLU_KERNELS(fp32, DATAFLOW_FP32)
SWIGLU_KERNELS(fp16, DATAFLOW_FP16)
SWIGLU_KERNELS(bf16, DATAFLOW_BF16)

/* ---- launch (both ops: rows * ffn elements of the dtype) ---- */

static int swiglu_parts(const Op *op, int64_t rows, int64_t ffn, int tensor_arg)
{
	int64_t size = (int64_t)dataflow_datatype_size(op->skeleton.arg_dtypes[tensor_arg]);
	return dataflow_elementwise_parts(rows * ffn, PART_MIN_BYTES / size);
}

DATAFLOW_HOST_LAUNCH(dataflow_host_swiglu_launch, Swiglu_Args, dataflow_swiglu_args,
		     swiglu_parts(op, a.rows, a.ffn, DATAFLOW_SWIGLU_ARG_OUT))
DATAFLOW_HOST_LAUNCH(dataflow_host_swiglu_bwd_launch, Swiglu_Bwd_Args, dataflow_swiglu_bwd_args,
		     swiglu_parts(op, a.rows, a.ffn, DATAFLOW_SWIGLU_BWD_ARG_D_GATE))
