#ifndef DATAFLOW_SIMD_H
#define DATAFLOW_SIMD_H

/* Internal (libdataflow/internal, seen by libdataflow and the host kernels only): the
 * runtime choice of vector path, the per-ISA vector vocabulary that kernels write their
 * vector loops in (one body for every ISA, see "one body per ISA" below), and in-register
 * bf16/fp16 <-> fp32 conversions for dataflow_convert and for kernels that compute in fp32.
 * A kernel keeps its vector body and a scalar loop (dataflow_fp32_to_bf16 and friends) for
 * the tail and for CPUs without AVX2. Every path gives the same bits as dataflow_convert:
 * RNE with subnormals, Inf on overflow, bf16 NaN -> canonical quiet NaN, fp16 NaN payloads
 * kept as numpy keeps them. */

#include <immintrin.h>

#include "dataflow/datatype.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SIMD_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define SIMD_TARGET_AVX2 __attribute__((target("avx2,f16c,fma")))
#define SIMD_INLINE __attribute__((always_inline)) static inline

enum { SIMD_SCALAR = 0, SIMD_AVX2 = 1, SIMD_AVX512 = 2 };

/* Chosen once in libdataflow, so conversions and kernels always take the same path. */
static inline int simd_level(void)
{
	return dataflow_simd_level();
}

/* Calls name##_avx512, name##_avx2 or name##_scalar with the arguments: the best path this CPU
 * (and DATAFLOW_SIMD) allows. */
#define SIMD_DISPATCH(name, ...)                                                                     \
	do {                                                                                           \
		int level_ = simd_level();                                                             \
		if (level_ == SIMD_AVX512)                                                             \
			name##_avx512(__VA_ARGS__);                                                    \
		else if (level_ == SIMD_AVX2)                                                          \
			name##_avx2(__VA_ARGS__);                                                      \
		else                                                                                   \
			name##_scalar(__VA_ARGS__);                                                    \
	} while (0)

/* ---- one body per ISA ----
 * A vector loop is written once, as a function-like macro of the ISA's name `isa` (avx512 or
 * avx2), and SIMD_EACH_ISA(BODY) stamps it once per ISA. In the body, Vf_##isa is a vector
 * of VL_##isa floats, Vu_##isa the same bits as uint32 lanes (a cast reinterprets), Vm_##isa
 * a lane mask (from vcmp), Vd_##isa a vector of VL_##isa / 2 doubles, and v<op>_##isa the
 * operations below. + - * / and the integer operators are plain C operators on the vectors
 * (GCC/Clang vector extensions, which the intrinsics are themselves built on; a scalar
 * operand stands for every lane). The build is ISO C (-ffp-contract=off), so a * b + c
 * stays a rounded product and a rounded sum on every path, as in the scalar loops: fma
 * happens only where a body says vfma.
 *
 * Why this mechanism: C has no templates, so a body that must compile to __m512 code and to
 * __m256 code is text stamped per ISA. Tried and rejected: one 16-lane GCC vector type for
 * both ISAs, compiled under each target attribute (no macro bodies, but without AVX-512 GCC
 * keeps 64-byte vectors in memory: every operation goes through the stack, and -Wpsabi
 * warns); an always_inline body without a target attribute calling per-ISA helpers (GCC
 * refuses to inline intrinsics into it: "target specific option mismatch"); the kernel
 * files compiled once per ISA (a build change, and their scalar code compiled for AVX-512
 * too). The body keeps every lane assignment explicit: code that needs a fixed lane count
 * for its bits (16-lane row sums, 32-lane softmax) says so with VL_##isa, never assumes it. */

#define SIMD_EACH_ISA(BODY) BODY(avx512) BODY(avx2)
#define SIMD_TARGET_avx512 SIMD_TARGET_AVX512
#define SIMD_TARGET_avx2 SIMD_TARGET_AVX2
#define SIMD_TARGET_scalar /* the baseline: for wrappers stamped for all three paths */
/* a function of the vector body for isa: compiled for it, always inlined */
#define SIMD_ISA_INLINE(isa) SIMD_TARGET_##isa SIMD_INLINE

enum { VL_avx512 = 16, VL_avx2 = 8 };
typedef __m512 Vf_avx512;
typedef __m256 Vf_avx2;
typedef __m512d Vd_avx512;
typedef __m256d Vd_avx2;
typedef uint32_t Vu_avx512 __attribute__((vector_size(64)));
typedef uint32_t Vu_avx2 __attribute__((vector_size(32)));
typedef __mmask16 Vm_avx512;
typedef __m256 Vm_avx2;

/* the operations the two ISAs' intrinsics spell alike but for the prefix mm */
#define SIMD_COMMON_OPS(isa, mm)                                                                     \
	SIMD_ISA_INLINE(isa) Vf_##isa vset1_##isa(float x) { return mm##_set1_ps(x); }                    \
	SIMD_ISA_INLINE(isa) Vf_##isa vloadf_##isa(const float *p) { return mm##_loadu_ps(p); }           \
	SIMD_ISA_INLINE(isa) void vstoref_##isa(float *p, Vf_##isa x) { mm##_storeu_ps(p, x); }           \
	/* a * b + c, rounded once */                                                                \
	SIMD_ISA_INLINE(isa) Vf_##isa vfma_##isa(Vf_##isa a, Vf_##isa b, Vf_##isa c)                      \
	{                                                                                            \
		return mm##_fmadd_ps(a, b, c);                                                       \
	}                                                                                            \
	SIMD_ISA_INLINE(isa) Vf_##isa vsqrt_##isa(Vf_##isa x) { return mm##_sqrt_ps(x); }                 \
	/* a > b ? a : b per lane (maxps: b where either is NaN) */                                  \
	SIMD_ISA_INLINE(isa) Vf_##isa vmax_##isa(Vf_##isa a, Vf_##isa b) { return mm##_max_ps(a, b); }    \
	/* a non-temporal store to p, aligned to sizeof(Vf_##isa) */                                 \
	SIMD_ISA_INLINE(isa) void vstream_##isa(float *p, Vf_##isa x) { mm##_stream_ps(p, x); }

SIMD_COMMON_OPS(avx512, _mm512)
SIMD_COMMON_OPS(avx2, _mm256)

/* the lanes where a pred b (_CMP_LT_OQ, ...: the same predicates in both ISAs); a macro, as
 * the predicate must reach the intrinsic as a constant even in unoptimized builds */
#define vcmp_avx512(a, b, pred) _mm512_cmp_ps_mask(a, b, pred)
#define vcmp_avx2(a, b, pred) _mm256_cmp_ps(a, b, pred)

/* m ? yes : no per lane */
SIMD_TARGET_AVX512 SIMD_INLINE Vf_avx512 vselect_avx512(Vm_avx512 m, Vf_avx512 yes, Vf_avx512 no)
{
	return _mm512_mask_blend_ps(m, no, yes);
}

SIMD_TARGET_AVX2 SIMD_INLINE Vf_avx2 vselect_avx2(Vm_avx2 m, Vf_avx2 yes, Vf_avx2 no)
{
	return _mm256_blendv_ps(no, yes, m);
}

/* whether any lane of m is set */
SIMD_TARGET_AVX512 SIMD_INLINE int vany_avx512(Vm_avx512 m)
{
	return m != 0;
}

SIMD_TARGET_AVX2 SIMD_INLINE int vany_avx2(Vm_avx2 m)
{
	return _mm256_movemask_ps(m) != 0;
}

/* lanes [0, VL / 2) and [VL / 2, VL) of x, widened to double (exactly) */
SIMD_TARGET_AVX512 SIMD_INLINE Vd_avx512 vwiden_lo_avx512(Vf_avx512 x)
{
	return _mm512_cvtps_pd(_mm512_castps512_ps256(x));
}

SIMD_TARGET_AVX512 SIMD_INLINE Vd_avx512 vwiden_hi_avx512(Vf_avx512 x)
{
	return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}

SIMD_TARGET_AVX2 SIMD_INLINE Vd_avx2 vwiden_lo_avx2(Vf_avx2 x)
{
	return _mm256_cvtps_pd(_mm256_castps256_ps128(x));
}

SIMD_TARGET_AVX2 SIMD_INLINE Vd_avx2 vwiden_hi_avx2(Vf_avx2 x)
{
	return _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
}

/* x rounded to the nearest integer (ties to even, by the explicit immediate), as a float */
SIMD_TARGET_AVX512 SIMD_INLINE Vf_avx512 vrint_avx512(Vf_avx512 x)
{
	return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

SIMD_TARGET_AVX2 SIMD_INLINE Vf_avx2 vrint_avx2(Vf_avx2 x)
{
	return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* 2^n for integral n in [-127, 127], built from the exponent bits (n = -127 gives 0) */
SIMD_TARGET_AVX512 SIMD_INLINE Vf_avx512 vpow2i_avx512(Vf_avx512 n)
{
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}

SIMD_TARGET_AVX2 SIMD_INLINE Vf_avx2 vpow2i_avx2(Vf_avx2 n)
{
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}

/* x rounded to fp16 (RNE, by the explicit immediate) and widened back, by the hardware */
SIMD_TARGET_AVX512 SIMD_INLINE Vf_avx512 vround_fp16_avx512(Vf_avx512 x)
{
	return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

SIMD_TARGET_AVX2 SIMD_INLINE Vf_avx2 vround_fp16_avx2(Vf_avx2 x)
{
	return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* ---- AVX-512, 16 lanes ---- */

/* bf16 is the top half of fp32 */
SIMD_TARGET_AVX512 static inline __m512 simd_load_bf16_avx512(const uint16_t *p)
{
	__m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
	return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}

/* RNE: add 0x7fff plus the kept lsb, keep the top half; NaN -> sign | 0x7fc0 */
SIMD_TARGET_AVX512 static inline void simd_store_bf16_avx512(uint16_t *p, __m512 x)
{
	__m512i u = _mm512_castps_si512(x);
	__m512i top = _mm512_srli_epi32(u, 16);
	__m512i lsb = _mm512_and_si512(top, _mm512_set1_epi32(1));
	__m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
	__m512i qnan = _mm512_or_si512(_mm512_and_si512(top, _mm512_set1_epi32(0x8000)), _mm512_set1_epi32(0x7fc0));
	r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, qnan);
	_mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(r));
}

/* vcvtph2ps quiets signalling NaNs; NaN lanes are rebuilt with the payload as it was */
SIMD_TARGET_AVX512 static inline __m512 simd_load_fp16_avx512(const uint16_t *p)
{
	__m256i h = _mm256_loadu_si256((const __m256i *)p);
	__m512 x = _mm512_cvtph_ps(h);
	__mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
	if (nan) {
		__m512i w = _mm512_cvtepu16_epi32(h);
		__m512i fix = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x3ff)), 13),
					      _mm512_set1_epi32(0x7f800000));
		fix = _mm512_or_si512(fix, _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x8000)), 16));
		x = _mm512_mask_blend_ps(nan, x, _mm512_castsi512_ps(fix));
	}
	return x;
}

/* vcvtps2ph with an explicit RNE immediate (independent of MXCSR); NaN lanes keep the top
 * 10 payload bits, at least 1, as numpy does */
SIMD_TARGET_AVX512 static inline void simd_store_fp16_avx512(uint16_t *p, __m512 x)
{
	__m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
	if (nan) {
		__m512i u = _mm512_castps_si512(x);
		__m512i payload = _mm512_max_epu32(
			_mm512_srli_epi32(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffff)), 13), _mm512_set1_epi32(1));
		__m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000));
		__m512i fix = _mm512_or_si512(_mm512_or_si512(sign, payload), _mm512_set1_epi32(0x7c00));
		h = _mm256_mask_blend_epi16(nan, h, _mm512_cvtepi32_epi16(fix));
	}
	_mm256_storeu_si256((__m256i *)p, h);
}

/* ---- AVX2, 8 lanes ---- */

/* 8 x uint32 (each < 2^16) -> 8 x uint16 */
SIMD_TARGET_AVX2 static inline __m128i simd_narrow16_avx2(__m256i r)
{
	return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

SIMD_TARGET_AVX2 static inline __m256 simd_load_bf16_avx2(const uint16_t *p)
{
	__m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
	return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

SIMD_TARGET_AVX2 static inline void simd_store_bf16_avx2(uint16_t *p, __m256 x)
{
	__m256i u = _mm256_castps_si256(x);
	__m256i top = _mm256_srli_epi32(u, 16);
	__m256i lsb = _mm256_and_si256(top, _mm256_set1_epi32(1));
	__m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
	__m256i qnan = _mm256_or_si256(_mm256_and_si256(top, _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(0x7fc0));
	r = _mm256_blendv_epi8(r, qnan, _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
	_mm_storeu_si128((__m128i *)p, simd_narrow16_avx2(r));
}

SIMD_TARGET_AVX2 static inline __m256 simd_load_fp16_avx2(const uint16_t *p)
{
	__m128i h = _mm_loadu_si128((const __m128i *)p);
	__m256 x = _mm256_cvtph_ps(h);
	__m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
	if (_mm256_movemask_ps(nan)) {
		__m256i w = _mm256_cvtepu16_epi32(h);
		__m256i fix = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x3ff)), 13),
					      _mm256_set1_epi32(0x7f800000));
		fix = _mm256_or_si256(fix, _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x8000)), 16));
		x = _mm256_blendv_ps(x, _mm256_castsi256_ps(fix), nan);
	}
	return x;
}

SIMD_TARGET_AVX2 static inline void simd_store_fp16_avx2(uint16_t *p, __m256 x)
{
	__m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
	if (_mm256_movemask_ps(nan)) {
		__m256i u = _mm256_castps_si256(x);
		__m256i payload = _mm256_max_epu32(
			_mm256_srli_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffff)), 13), _mm256_set1_epi32(1));
		__m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000));
		__m256i fix = _mm256_or_si256(_mm256_or_si256(sign, payload), _mm256_set1_epi32(0x7c00));
		__m128i lanes = simd_narrow16_avx2(_mm256_srli_epi32(_mm256_castps_si256(nan), 16));
		h = _mm_blendv_epi8(h, simd_narrow16_avx2(fix), lanes);
	}
	_mm_storeu_si128((__m128i *)p, h);
}

/* ---- bytes, both ISAs: VL_##isa bytes widened to uint32 lanes, and uint32 lanes (each
 * < 2^8) narrowed to bytes (GCC 12 lowers __builtin_convertvector of bytes lane by lane) ---- */

SIMD_ISA_INLINE(avx512) Vu_avx512 vload_u8_avx512(const uint8_t *p)
{
	return (Vu_avx512)_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

SIMD_ISA_INLINE(avx2) Vu_avx2 vload_u8_avx2(const uint8_t *p)
{
	return (Vu_avx2)_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

SIMD_ISA_INLINE(avx512) void vstore_u8_avx512(uint8_t *p, Vu_avx512 x)
{
	_mm_storeu_si128((__m128i *)p, _mm512_cvtepi32_epi8((__m512i)x));
}

SIMD_ISA_INLINE(avx2) void vstore_u8_avx2(uint8_t *p, Vu_avx2 x)
{
	__m128i w = simd_narrow16_avx2((__m256i)x);
	_mm_storel_epi64((__m128i *)p, _mm_packus_epi16(w, w));
}

#endif
