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
 * code, and every exp is the same polynomial (simd_exp_nonpos of simd_exp.h, scalar and
 * vector, same fma sequence). Rows are split among parts, never within a row. */
#include <float.h>
#include <math.h>

#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "simd_dtype.h"
#include "simd_exp.h"

#define CE_LANES 32			/* two zmm / four ymm of running (max, sum) */
#define CE_MIN_PART_ELEMENTS 65536	/* a part gets at least this many logits */

typedef Dataflow_Cross_Entropy_Args Ce_Args;

/* ---- pass 1: per-lane online max / sum ----
 * Lane update for x: if x > m { s *= exp(m - x); m = x }  s += exp(x - m).
 * m starts at -FLT_MAX (not -Inf) so that -Inf logits add exp(-Inf) = 0 instead of NaN.
 * The vector body keeps the CE_LANES lanes as CE_LANES / VL vectors and rescales every lane
 * of a vector when any lane's max grows: the others get exp(0) = 1 exactly, so the bits
 * match the per-lane rule. Each returns where it stopped. (Not always_inline: ce_row, which
 * has no target attribute, calls them.) */

#define CE_VECTORS(isa) (CE_LANES / VL_##isa)
#define CE_MAXSUM(isa)                                                                               \
	SIMD_TARGET_##isa static inline int64_t ce_maxsum_##isa(const void *x, int64_t n, float *m, float *s, \
							      DataflowDatatype dt)                           \
	{                                                                                            \
		Vf_##isa mv[CE_VECTORS(isa)], sv[CE_VECTORS(isa)];                                   \
		for (int k = 0; k < CE_VECTORS(isa); k++)                                            \
			mv[k] = vloadf_##isa(m + k * VL_##isa), sv[k] = vloadf_##isa(s + k * VL_##isa); \
		int64_t i = 0;                                                                       \
		for (; i + CE_LANES <= n; i += CE_LANES) {                                           \
			for (int k = 0; k < CE_VECTORS(isa); k++) {                                  \
				Vf_##isa v = vload_##isa(x, i + k * VL_##isa, dt);                   \
				if (vany_##isa(vcmp_##isa(v, mv[k], _CMP_GT_OQ))) {                  \
					Vf_##isa mn = vmax_##isa(v, mv[k]); /* NaN lanes keep m, as the scalar rule */ \
					sv[k] = sv[k] * simd_exp_nonpos_##isa(mv[k] - mn);           \
					mv[k] = mn;                                                  \
				}                                                                    \
				sv[k] = sv[k] + simd_exp_nonpos_##isa(v - mv[k]);                    \
			}                                                                            \
		}                                                                                    \
		for (int k = 0; k < CE_VECTORS(isa); k++)                                            \
			vstoref_##isa(m + k * VL_##isa, mv[k]), vstoref_##isa(s + k * VL_##isa, sv[k]); \
		return i;                                                                            \
	}
SIMD_EACH_ISA(CE_MAXSUM)

static inline void ce_maxsum_scalar(const void *x, int64_t i, int64_t n, float *m, float *s, DataflowDatatype t)
{
	for (; i < n; i++) {
		int l = (int)(i % CE_LANES);
		float v = simd_load1(x, i, t);
		if (v > m[l]) {
			s[l] *= simd_exp_nonpos(m[l] - v);
			m[l] = v;
		}
		s[l] += simd_exp_nonpos(v - m[l]);
	}
}

/* ---- pass 2: g_j = exp(x_j - M) * c with c = scale / S (the label is fixed up after) ---- */

#define CE_GRAD(isa)                                                                                 \
	SIMD_TARGET_##isa static inline int64_t ce_grad_##isa(const void *x, void *g, int64_t n, float M, float c, \
							    DataflowDatatype dt)                             \
	{                                                                                            \
		Vf_##isa mv = vset1_##isa(M), cv = vset1_##isa(c);                                   \
		int64_t i = 0;                                                                       \
		for (; i + VL_##isa <= n; i += VL_##isa)                                             \
			vstore_##isa(g, i, simd_exp_nonpos_##isa(vload_##isa(x, i, dt) - mv) * cv, dt); \
		return i;                                                                            \
	}
SIMD_EACH_ISA(CE_GRAD)

static inline void ce_grad_scalar(const void *x, void *g, int64_t i, int64_t n, float M, float c, DataflowDatatype t)
{
	for (; i < n; i++)
		simd_store1(g, i, simd_exp_nonpos(simd_load1(x, i, t) - M) * c, t);
}

/* ---- one row ---- */

/* always inlined so that level and t are constants in each per-ISA row loop below */
__attribute__((always_inline)) static inline void ce_row(Ce_Args a, int64_t row, int level, DataflowDatatype t)
{
	size_t es = t == DATAFLOW_FP32 ? 4 : 2;
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

	float xl = simd_load1(x, label, t); /* read before pass 2 may overwrite it */
	a.loss[row] = (M + logf(S)) - xl;

	float rs = 1.0f / S, c = rs * a.scale;
	if (level == SIMD_AVX512)
		i = ce_grad_avx512(x, g, n, M, c, t);
	else if (level == SIMD_AVX2)
		i = ce_grad_avx2(x, g, n, M, c, t);
	else
		i = 0;
	ce_grad_scalar(x, g, i, n, M, c, t);
	simd_store1(g, label, (simd_exp_nonpos(xl - M) * rs - 1.0f) * a.scale, t);
}

/* rows [r0, r1) on one path (level: its SIMD_* constant) */
#define CE_ROWS(path, level)                                                                         \
	SIMD_TARGET_##path static void ce_rows_##path(Ce_Args a, int64_t r0, int64_t r1, DataflowDatatype t) \
	{                                                                                            \
		for (int64_t r = r0; r < r1; r++)                                                    \
			ce_row(a, r, level, t);                                                      \
	}
CE_ROWS(avx512, SIMD_AVX512)
CE_ROWS(avx2, SIMD_AVX2)
CE_ROWS(scalar, SIMD_SCALAR)

static void ce_run(void **args, int part, int num_parts, DataflowDatatype t)
{
	Ce_Args a = dataflow_cross_entropy_args(args);
	int64_t r0, r1;
	dataflow_part_range(a.tokens, part, num_parts, 1, &r0, &r1);
	SIMD_DISPATCH(ce_rows, a, r0, r1, t);
}

DATAFLOW_HOST_FLOAT_KERNELS(cross_entropy, ce_run, DATAFLOW_FP32, DATAFLOW_BF16, DATAFLOW_FP16)

/* Parts are row ranges of at least CE_MIN_PART_ELEMENTS logits. */
DATAFLOW_HOST_LAUNCH(dataflow_host_cross_entropy_launch, Ce_Args, dataflow_cross_entropy_args,
		     dataflow_elementwise_parts(a.tokens, (CE_MIN_PART_ELEMENTS + a.vocab - 1) / a.vocab))
