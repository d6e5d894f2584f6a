/* moe_combine and moe_combine_bwd, per token (parts own token ranges), in fp32:
 *   forward:  y[t] = sum_j w[t, j] * y_perm[s_j]          (s_j = slot_of[t, j]; w = 1 when NULL)
 *   backward: d_y_perm[s_j] = w[t, j] * dy[t],  d_w[t, j] = dy[t] . y_perm[s_j]
 * The forward accumulates a row of fp32 in a buffer of the part, j in order, one rounding at
 * the store. The dot product sums lanes of VL_isa columns then the lanes: its order depends on
 * the SIMD path (tolerances, not bits, across paths). A bad slot contributes nothing. */
#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "simd_dtype.h"

#define MIN_TOKENS 16
#define ROW_CHUNK 1024 /* columns per fp32 accumulator pass */

typedef Dataflow_Moe_Combine_Args Combine_Args;
typedef Dataflow_Moe_Combine_Bwd_Args Combine_Bwd_Args;

SIMD_INLINE int slot_ok(int32_t s, const int64_t n)
{
	return s >= 0 && s < n;
}

/* ---- forward: acc[c0, c1) = sum_j w_j y_perm[s_j, c0:c1), stored to y ---- */

SIMD_INLINE void combine_cols_scalar(const Combine_Args *a, int64_t t, int64_t c, int64_t c1, float *acc,
				     DataflowDatatype dt)
{
	int64_t n = a->tokens * a->top_k, c0 = c;
	for (int64_t i = c; i < c1; i++)
		acc[i - c0] = 0.0f;
	for (int64_t j = 0; j < a->top_k; j++) {
		int32_t s = a->slot_of[t * a->top_k + j];
		if (!slot_ok(s, n))
			continue;
		float w = a->topk_weights ? a->topk_weights[t * a->top_k + j] : 1.0f;
		for (int64_t i = c; i < c1; i++)
			acc[i - c0] += w * simd_load1(a->y_perm, s * a->hidden + i, dt);
	}
	for (int64_t i = c; i < c1; i++)
		simd_store1(a->y, t * a->hidden + i, acc[i - c0], dt);
}

#define COMBINE_VECTOR(isa)                                                                                \
	SIMD_ISA_INLINE(isa) void combine_cols_##isa(const Combine_Args *a, int64_t t, int64_t c0, int64_t c1,   \
						     float *acc, DataflowDatatype dt)                            \
	{                                                                                                  \
		int64_t n = a->tokens * a->top_k, vend = c0 + (c1 - c0) / VL_##isa * VL_##isa;              \
		for (int64_t i = c0; i < vend; i += VL_##isa)                                              \
			vstoref_##isa(acc + (i - c0), vset1_##isa(0.0f));                                  \
		for (int64_t j = 0; j < a->top_k; j++) {                                                   \
			int32_t s = a->slot_of[t * a->top_k + j];                                            \
			if (!slot_ok(s, n))                                                                \
				continue;                                                                  \
			Vf_##isa w = vset1_##isa(a->topk_weights ? a->topk_weights[t * a->top_k + j] : 1.0f); \
			for (int64_t i = c0; i < vend; i += VL_##isa)                                      \
				vstoref_##isa(acc + (i - c0), vloadf_##isa(acc + (i - c0)) +               \
								      w * vload_##isa(a->y_perm, s * a->hidden + i, dt)); \
		}                                                                                          \
		for (int64_t i = c0; i < vend; i += VL_##isa)                                              \
			vstore_##isa(a->y, t * a->hidden + i, vloadf_##isa(acc + (i - c0)), dt);           \
		combine_cols_scalar(a, t, vend, c1, acc + (vend - c0), dt); /* the tail */                 \
	}
SIMD_EACH_ISA(COMBINE_VECTOR)

#define COMBINE_BODY(isa)                                                                                  \
	SIMD_ISA_INLINE(isa) void combine_##isa(const Combine_Args *a, int64_t t0, int64_t t1, DataflowDatatype dt) \
	{                                                                                                  \
		float acc[ROW_CHUNK];                                                                      \
		for (int64_t t = t0; t < t1; t++)                                                          \
			for (int64_t c = 0; c < a->hidden; c += ROW_CHUNK)                                 \
				combine_cols_##isa(a, t, c, c + ROW_CHUNK < a->hidden ? c + ROW_CHUNK : a->hidden, \
						   acc, dt);                                               \
	}
SIMD_EACH_ISA(COMBINE_BODY)
COMBINE_BODY(scalar)

/* ---- backward ---- */

SIMD_INLINE float combine_bwd_tail_scalar(const Combine_Bwd_Args *a, int64_t t, int32_t s, float w, int64_t c,
					  DataflowDatatype dt)
{
	float dot = 0.0f;
	for (; c < a->hidden; c++) {
		float dy = simd_load1(a->dy, t * a->hidden + c, dt);
		simd_store1(a->d_y_perm, s * a->hidden + c, w * dy, dt);
		dot += dy * simd_load1(a->y_perm, s * a->hidden + c, dt);
	}
	return dot;
}

#define COMBINE_BWD_ROW(isa)                                                                               \
	SIMD_ISA_INLINE(isa) float combine_bwd_row_##isa(const Combine_Bwd_Args *a, int64_t t, int32_t s, float w, \
							 DataflowDatatype dt)                                     \
	{                                                                                                  \
		Vf_##isa dot = vset1_##isa(0.0f), wv = vset1_##isa(w);                                    \
		int64_t c = 0;                                                                             \
		for (; c + VL_##isa <= a->hidden; c += VL_##isa) {                                         \
			Vf_##isa dy = vload_##isa(a->dy, t * a->hidden + c, dt);                           \
			vstore_##isa(a->d_y_perm, s * a->hidden + c, wv * dy, dt);                         \
			dot = dot + dy * vload_##isa(a->y_perm, s * a->hidden + c, dt);                    \
		}                                                                                          \
		float lanes[VL_##isa], sum = 0.0f;                                                         \
		vstoref_##isa(lanes, dot);                                                                 \
		for (int l = 0; l < VL_##isa; l++)                                                         \
			sum += lanes[l];                                                                   \
		return sum + combine_bwd_tail_scalar(a, t, s, w, c, dt);                                   \
	}
SIMD_EACH_ISA(COMBINE_BWD_ROW)

SIMD_INLINE float combine_bwd_row_scalar(const Combine_Bwd_Args *a, int64_t t, int32_t s, float w, DataflowDatatype dt)
{
	return combine_bwd_tail_scalar(a, t, s, w, 0, dt);
}

#define COMBINE_BWD_BODY(isa)                                                                              \
	SIMD_ISA_INLINE(isa) void combine_bwd_##isa(const Combine_Bwd_Args *a, int64_t t0, int64_t t1,            \
						    DataflowDatatype dt)                                          \
	{                                                                                                  \
		int64_t n = a->tokens * a->top_k;                                                          \
		for (int64_t t = t0; t < t1; t++)                                                          \
			for (int64_t j = 0; j < a->top_k; j++) {                                           \
				int64_t i = t * a->top_k + j;                                              \
				int32_t s = a->slot_of[i];                                                   \
				a->d_topk_weights[i] =                                                     \
					slot_ok(s, n) ? combine_bwd_row_##isa(a, t, s, a->topk_weights[i], dt) : 0.0f; \
			}                                                                                  \
	}
SIMD_EACH_ISA(COMBINE_BWD_BODY)
COMBINE_BWD_BODY(scalar)

#define COMBINE_KERNELS(name, DT)                                                                          \
	SIMD_DTYPE_KERNEL(combine_##name, combine, Combine_Args, DT)                                       \
	SIMD_DTYPE_KERNEL(combine_bwd_##name, combine_bwd, Combine_Bwd_Args, DT)                           \
	SIMD_DTYPE_ENTRY(dataflow_host_moe_combine_##name, combine_##name, Combine_Args, dataflow_moe_combine_args, \
			 a.tokens, 1)                                                                      \
	SIMD_DTYPE_ENTRY(dataflow_host_moe_combine_bwd_##name, combine_bwd_##name, Combine_Bwd_Args,              \
			 dataflow_moe_combine_bwd_args, a.tokens, 1)

COMBINE_KERNELS(fp32, DATAFLOW_FP32)
COMBINE_KERNELS(fp16, DATAFLOW_FP16)
COMBINE_KERNELS(bf16, DATAFLOW_BF16)

DATAFLOW_HOST_LAUNCH(dataflow_host_moe_combine_launch, Combine_Args, dataflow_moe_combine_args,
		     dataflow_elementwise_parts(a.tokens, MIN_TOKENS))
DATAFLOW_HOST_LAUNCH(dataflow_host_moe_combine_bwd_launch, Combine_Bwd_Args, dataflow_moe_combine_bwd_args,
		     dataflow_elementwise_parts(a.tokens, MIN_TOKENS))
