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
 * match the per-lane rule. Each returns where it stopped; the scalar path's "vector part"
 * does nothing and the tail loop does it all. */

#define CE_VECTORS(isa) (CE_LANES / VL_##isa)
#define CE_MAXSUM(isa)                                                                               \
	SIMD_ISA_INLINE(isa) int64_t ce_maxsum_##isa(const void *x, int64_t n, float *m, float *s, \
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

SIMD_INLINE int64_t ce_maxsum_scalar(const void *x, int64_t n, float *m, float *s, DataflowDatatype t)
{
	(void)x, (void)n, (void)m, (void)s, (void)t;
	return 0;
}

/* the tail, [i, n) */
SIMD_INLINE void ce_maxsum_from(const void *x, int64_t i, int64_t n, float *m, float *s, DataflowDatatype t)
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
	SIMD_ISA_INLINE(isa) int64_t ce_grad_##isa(const void *x, void *g, int64_t n, float M, float c, \
							    DataflowDatatype dt)                             \
	{                                                                                            \
		Vf_##isa mv = vset1_##isa(M), cv = vset1_##isa(c);                                   \
		int64_t i = 0;                                                                       \
		for (; i + VL_##isa <= n; i += VL_##isa)                                             \
			vstore_##isa(g, i, simd_exp_nonpos_##isa(vload_##isa(x, i, dt) - mv) * cv, dt); \
		return i;                                                                            \
	}
SIMD_EACH_ISA(CE_GRAD)

SIMD_INLINE int64_t ce_grad_scalar(const void *x, void *g, int64_t n, float M, float c, DataflowDatatype t)
{
	(void)x, (void)g, (void)n, (void)M, (void)c, (void)t;
	return 0;
}

/* the tail, [i, n) */
SIMD_INLINE void ce_grad_from(const void *x, void *g, int64_t i, int64_t n, float M, float c, DataflowDatatype t)
{
	for (; i < n; i++)
		simd_store1(g, i, simd_exp_nonpos(simd_load1(x, i, t) - M) * c, t);
}

/* ---- one row: the scalar steps around the two passes ---- */

typedef struct {
	const void *x;
	void *g;
	int64_t n, label;
	float m[CE_LANES], s[CE_LANES]; /* pass 1's lanes */
	float M, xl, rs, c;             /* the row max, x[label], 1 / S, scale / S */
} Ce_Row;

/* Row `row`: 0 (loss and gradient already written as zeros) if its label is ignored or out
 * of range, else 1 with w ready for pass 1. */
SIMD_INLINE int ce_row_begin(const Ce_Args *a, int64_t row, Ce_Row *w, DataflowDatatype t)
{
	size_t es = t == DATAFLOW_FP32 ? 4 : 2;
	w->n = a->vocab;
	w->x = (const char *)a->logits + (size_t)row * (size_t)w->n * es;
	w->g = (char *)a->dlogits + (size_t)row * (size_t)w->n * es;
	w->label = a->labels[row];
	if (w->label == a->ignore_index || w->label < 0 || w->label >= w->n) {
		a->loss[row] = 0.0f;
		memset(w->g, 0, (size_t)w->n * es); /* +0.0 in every dtype */
		return 0;
	}
	for (int l = 0; l < CE_LANES; l++)
		w->m[l] = -FLT_MAX, w->s[l] = 0.0f;
	return 1;
}

/* after pass 1: the lanes combined in one fixed order, the loss, pass 2's constants */
SIMD_INLINE void ce_row_loss(const Ce_Args *a, int64_t row, Ce_Row *w, DataflowDatatype t)
{
	float M = w->m[0], S = 0.0f;
	for (int l = 1; l < CE_LANES; l++)
		M = w->m[l] > M ? w->m[l] : M;
	for (int l = 0; l < CE_LANES; l++)
		S += w->s[l] * simd_exp_nonpos(w->m[l] - M);
	w->M = M;
	w->xl = simd_load1(w->x, w->label, t); /* read before pass 2 may overwrite it */
	a->loss[row] = (M + logf(S)) - w->xl;
	w->rs = 1.0f / S;
	w->c = w->rs * a->scale;
}

/* rows [r0, r1) on one path; pass 2 writes every g_j, then the label's is fixed up */
#define CE_ROWS(path)                                                                                \
	SIMD_ISA_INLINE(path) void ce_rows_##path(const Ce_Args *a, int64_t r0, int64_t r1, DataflowDatatype t) \
	{                                                                                            \
		Ce_Row w;                                                                            \
		for (int64_t r = r0; r < r1; r++) {                                                  \
			if (!ce_row_begin(a, r, &w, t))                                              \
				continue;                                                            \
			int64_t i = ce_maxsum_##path(w.x, w.n, w.m, w.s, t);                         \
			ce_maxsum_from(w.x, i, w.n, w.m, w.s, t);                                    \
			ce_row_loss(a, r, &w, t);                                                    \
			i = ce_grad_##path(w.x, w.g, w.n, w.M, w.c, t);                              \
			ce_grad_from(w.x, w.g, i, w.n, w.M, w.c, t);                                 \
			simd_store1(w.g, w.label, (simd_exp_nonpos(w.xl - w.M) * w.rs - 1.0f) * a->scale, t); \
		}                                                                                    \
	}
SIMD_EACH_ISA(CE_ROWS)
CE_ROWS(scalar)

/* per dtype: rows split among parts, never within a row */
#define CE_KERNEL(name, DT)                                                                          \
	SIMD_DTYPE_KERNEL(ce_rows_##name, ce_rows, Ce_Args, DT)                                      \
	SIMD_DTYPE_ENTRY(dataflow_host_cross_entropy_##name, ce_rows_##name, Ce_Args, dataflow_cross_entropy_args, \
			 a.tokens, 1)

CE_KERNEL(fp32, DATAFLOW_FP32)
CE_KERNEL(bf16, DATAFLOW_BF16)
CE_KERNEL(fp16, DATAFLOW_FP16)

/* Parts are row ranges of at least CE_MIN_PART_ELEMENTS logits. */
DATAFLOW_HOST_LAUNCH(dataflow_host_cross_entropy_launch, Ce_Args, dataflow_cross_entropy_args,
		     dataflow_elementwise_parts(a.tokens, (CE_MIN_PART_ELEMENTS + a.vocab - 1) / a.vocab))
