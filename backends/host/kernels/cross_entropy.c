/* cross_entropy fused with softmax, one row (token) at a time:
 *   M = max_j x_j,  S = sum_j exp(x_j - M),  lse = M + log S
 *   loss = lse - x[label]
 *   dlogits_j = scale * (exp(x_j - M) / S - [j == label])
 * Two passes over the row: an online max/sum pass (each lane keeps a running max m and a sum
 * s rescaled by exp(m_old - m_new) only when its max grows), then one pass writing dlogits,
 * which may overwrite x in place. Rows whose label is ignore_index or outside [0, vocab) get
 * loss 0 and a zero gradient row; the label is never used as an index before that check.
 *
 * Bit-identical on every path (AVX-512, AVX2, scalar) and for any thread count: element j
 * of a row always goes to lane j % CE_LANES, lanes are combined in one fixed order by scalar
 * code, and every exp is the same polynomial (simd_exp_nonpos of simd_exp.h and its vector twins,
 * same fma sequence). Rows are split among parts, never within a row. */
#include <float.h>
#include <math.h>

#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "simd.h"
#include "simd_exp.h"

#define CE_LANES 32			/* two zmm / four ymm of running (max, sum) */
#define CE_MIN_PART_ELEMENTS 65536	/* a part gets at least this many logits */

typedef enum { CE_FP32, CE_BF16, CE_FP16 } Ce_Type;

typedef Dataflow_Cross_Entropy_Args Ce_Args;

/* ---- element access ---- */

static inline float ce_load(const void *p, int64_t i, Ce_Type t)
{
	if (t == CE_FP32)
		return ((const float *)p)[i];
	if (t == CE_BF16)
		return dataflow_bf16_to_fp32(((const uint16_t *)p)[i]);
	return dataflow_fp16_to_fp32(((const uint16_t *)p)[i]);
}

static inline void ce_store(void *p, int64_t i, float v, Ce_Type t)
{
	if (t == CE_FP32)
		((float *)p)[i] = v;
	else if (t == CE_BF16)
		((uint16_t *)p)[i] = dataflow_fp32_to_bf16(v);
	else
		((uint16_t *)p)[i] = dataflow_fp32_to_fp16(v);
}

SIMD_TARGET_AVX512 static inline __m512 ce_load_avx512(const void *p, int64_t i, Ce_Type t)
{
	if (t == CE_FP32)
		return _mm512_loadu_ps((const float *)p + i);
	if (t == CE_BF16)
		return simd_load_bf16_avx512((const uint16_t *)p + i);
	return simd_load_fp16_avx512((const uint16_t *)p + i);
}

SIMD_TARGET_AVX512 static inline void ce_store_avx512(void *p, int64_t i, __m512 v, Ce_Type t)
{
	if (t == CE_FP32)
		_mm512_storeu_ps((float *)p + i, v);
	else if (t == CE_BF16)
		simd_store_bf16_avx512((uint16_t *)p + i, v);
	else
		simd_store_fp16_avx512((uint16_t *)p + i, v);
}

SIMD_TARGET_AVX2 static inline __m256 ce_load_avx2(const void *p, int64_t i, Ce_Type t)
{
	if (t == CE_FP32)
		return _mm256_loadu_ps((const float *)p + i);
	if (t == CE_BF16)
		return simd_load_bf16_avx2((const uint16_t *)p + i);
	return simd_load_fp16_avx2((const uint16_t *)p + i);
}

SIMD_TARGET_AVX2 static inline void ce_store_avx2(void *p, int64_t i, __m256 v, Ce_Type t)
{
	if (t == CE_FP32)
		_mm256_storeu_ps((float *)p + i, v);
	else if (t == CE_BF16)
		simd_store_bf16_avx2((uint16_t *)p + i, v);
	else
		simd_store_fp16_avx2((uint16_t *)p + i, v);
}

/* ---- pass 1: per-lane online max / sum ----
 * Lane update for x: if x > m { s *= exp(m - x); m = x }  s += exp(x - m).
 * m starts at -FLT_MAX (not -Inf) so that -Inf logits add exp(-Inf) = 0 instead of NaN.
 * Vector paths rescale every lane when any lane's max grows: the others get
 * exp(0) = 1 exactly, so the bits match the per-lane rule. Each returns where it stopped. */

SIMD_TARGET_AVX512 static inline int64_t ce_maxsum_avx512(const void *x, int64_t n, float *m, float *s, Ce_Type t)
{
	__m512 mv[2], sv[2];
	for (int k = 0; k < 2; k++)
		mv[k] = _mm512_loadu_ps(m + 16 * k), sv[k] = _mm512_loadu_ps(s + 16 * k);
	int64_t i = 0;
	for (; i + CE_LANES <= n; i += CE_LANES) {
		for (int k = 0; k < 2; k++) {
			__m512 v = ce_load_avx512(x, i + 16 * k, t);
			if (_mm512_cmp_ps_mask(v, mv[k], _CMP_GT_OQ)) {
				__m512 mn = _mm512_max_ps(v, mv[k]); /* NaN lanes keep m, as the scalar rule */
				sv[k] = _mm512_mul_ps(sv[k], simd_exp_nonpos_avx512(_mm512_sub_ps(mv[k], mn)));
				mv[k] = mn;
			}
			sv[k] = _mm512_add_ps(sv[k], simd_exp_nonpos_avx512(_mm512_sub_ps(v, mv[k])));
		}
	}
	for (int k = 0; k < 2; k++)
		_mm512_storeu_ps(m + 16 * k, mv[k]), _mm512_storeu_ps(s + 16 * k, sv[k]);
	return i;
}

SIMD_TARGET_AVX2 static inline int64_t ce_maxsum_avx2(const void *x, int64_t n, float *m, float *s, Ce_Type t)
{
	__m256 mv[4], sv[4];
	for (int k = 0; k < 4; k++)
		mv[k] = _mm256_loadu_ps(m + 8 * k), sv[k] = _mm256_loadu_ps(s + 8 * k);
	int64_t i = 0;
	for (; i + CE_LANES <= n; i += CE_LANES) {
		for (int k = 0; k < 4; k++) {
			__m256 v = ce_load_avx2(x, i + 8 * k, t);
			if (_mm256_movemask_ps(_mm256_cmp_ps(v, mv[k], _CMP_GT_OQ))) {
				__m256 mn = _mm256_max_ps(v, mv[k]);
				sv[k] = _mm256_mul_ps(sv[k], simd_exp_nonpos_avx2(_mm256_sub_ps(mv[k], mn)));
				mv[k] = mn;
			}
			sv[k] = _mm256_add_ps(sv[k], simd_exp_nonpos_avx2(_mm256_sub_ps(v, mv[k])));
		}
	}
	for (int k = 0; k < 4; k++)
		_mm256_storeu_ps(m + 8 * k, mv[k]), _mm256_storeu_ps(s + 8 * k, sv[k]);
	return i;
}

static inline void ce_maxsum_scalar(const void *x, int64_t i, int64_t n, float *m, float *s, Ce_Type t)
{
	for (; i < n; i++) {
		int l = (int)(i % CE_LANES);
		float v = ce_load(x, i, t);
		if (v > m[l]) {
			s[l] *= simd_exp_nonpos(m[l] - v);
			m[l] = v;
		}
		s[l] += simd_exp_nonpos(v - m[l]);
	}
}

/* ---- pass 2: g_j = exp(x_j - M) * c with c = scale / S (the label is fixed up after) ---- */

SIMD_TARGET_AVX512 static inline int64_t ce_grad_avx512(const void *x, void *g, int64_t n, float M, float c,
							 Ce_Type t)
{
	__m512 mv = _mm512_set1_ps(M), cv = _mm512_set1_ps(c);
	int64_t i = 0;
	for (; i + 16 <= n; i += 16)
		ce_store_avx512(g, i, _mm512_mul_ps(simd_exp_nonpos_avx512(_mm512_sub_ps(ce_load_avx512(x, i, t), mv)), cv), t);
	return i;
}

SIMD_TARGET_AVX2 static inline int64_t ce_grad_avx2(const void *x, void *g, int64_t n, float M, float c, Ce_Type t)
{
	__m256 mv = _mm256_set1_ps(M), cv = _mm256_set1_ps(c);
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		ce_store_avx2(g, i, _mm256_mul_ps(simd_exp_nonpos_avx2(_mm256_sub_ps(ce_load_avx2(x, i, t), mv)), cv), t);
	return i;
}

static inline void ce_grad_scalar(const void *x, void *g, int64_t i, int64_t n, float M, float c, Ce_Type t)
{
	for (; i < n; i++)
		ce_store(g, i, simd_exp_nonpos(ce_load(x, i, t) - M) * c, t);
}

/* ---- one row ---- */

/* always inlined so that level and t are constants in each per-ISA row loop below */
__attribute__((always_inline)) static inline void ce_row(Ce_Args a, int64_t row, int level, Ce_Type t)
{
	size_t es = t == CE_FP32 ? 4 : 2;
	int64_t n = a.vocab;
	const void *x = (const char *)a.logits + (size_t)row * (size_t)n * es;
	void *g = (char *)a.dlogits + (size_t)row * (size_t)n * es;
	int64_t label = a.labels[row];
	if (label == a.ignore_index || label < 0 || label >= n) {
		a.loss[row] = 0.0f;
		memset(g, 0, (size_t)n * es); /* +0.0 in every dtype */
		return;
	}

	float m[CE_LANES], s[CE_LANES];
	for (int l = 0; l < CE_LANES; l++)
		m[l] = -FLT_MAX, s[l] = 0.0f;
	int64_t i = 0;
	if (level == SIMD_AVX512)
		i = ce_maxsum_avx512(x, n, m, s, t);
	else if (level == SIMD_AVX2)
		i = ce_maxsum_avx2(x, n, m, s, t);
	ce_maxsum_scalar(x, i, n, m, s, t);

	float M = m[0], S = 0.0f;
	for (int l = 1; l < CE_LANES; l++)
		M = m[l] > M ? m[l] : M;
	for (int l = 0; l < CE_LANES; l++)
		S += s[l] * simd_exp_nonpos(m[l] - M);

	float xl = ce_load(x, label, t); /* read before pass 2 may overwrite it */
	a.loss[row] = (M + logf(S)) - xl;

	float rs = 1.0f / S, c = rs * a.scale;
	if (level == SIMD_AVX512)
		i = ce_grad_avx512(x, g, n, M, c, t);
	else if (level == SIMD_AVX2)
		i = ce_grad_avx2(x, g, n, M, c, t);
	else
		i = 0;
	ce_grad_scalar(x, g, i, n, M, c, t);
	ce_store(g, label, (simd_exp_nonpos(xl - M) * rs - 1.0f) * a.scale, t);
}

SIMD_TARGET_AVX512 static void ce_rows_avx512(Ce_Args a, int64_t r0, int64_t r1, Ce_Type t)
{
	for (int64_t r = r0; r < r1; r++)
		ce_row(a, r, SIMD_AVX512, t);
}

SIMD_TARGET_AVX2 static void ce_rows_avx2(Ce_Args a, int64_t r0, int64_t r1, Ce_Type t)
{
	for (int64_t r = r0; r < r1; r++)
		ce_row(a, r, SIMD_AVX2, t);
}

static void ce_rows_scalar(Ce_Args a, int64_t r0, int64_t r1, Ce_Type t)
{
	for (int64_t r = r0; r < r1; r++)
		ce_row(a, r, SIMD_SCALAR, t);
}

static void ce_run(void **args, int part, int num_parts, Ce_Type t)
{
	Ce_Args a = dataflow_cross_entropy_args(args);
	int64_t r0, r1;
	dataflow_part_range(a.tokens, part, num_parts, 1, &r0, &r1);
	SIMD_DISPATCH(ce_rows, a, r0, r1, t);
}

DATAFLOW_HOST_FLOAT_KERNELS(cross_entropy, ce_run, CE_FP32, CE_BF16, CE_FP16)

/* Parts are row ranges of at least CE_MIN_PART_ELEMENTS logits. */
DATAFLOW_HOST_LAUNCH(dataflow_host_cross_entropy_launch, Ce_Args, dataflow_cross_entropy_args,
		     dataflow_elementwise_parts(a.tokens, (CE_MIN_PART_ELEMENTS + a.vocab - 1) / a.vocab))
