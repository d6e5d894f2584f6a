/* moe_router and moe_router_bwd, one token row per step (experts are few: scalar fp32 code),
 * parts own token ranges.
 *   forward:  p = softmax(l) (m = max, e = exp(l - m), p = e * (1 / sum e), as ATen's CPU
 *             softmax), ids = torch.topk(p, k) with torch's tie order (torch_topk.cuh),
 *             w = p[ids] (/ sum when norm_topk_prob)
 *   backward: dp[ids_j] = norm ? (dw_j - sum_i dw_i w_i) / S : dw_j,  S = sum_j p[ids_j]
 *             dl = p * (dp - sum(p * dp)) */
#include <math.h>
#include <string.h>

#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "dataflow/ops.h"
#include "torch_topk.cuh"

/* parts of at least this many tokens */
#define MIN_TOKENS 64

typedef Dataflow_Moe_Router_Args Router_Args;
typedef Dataflow_Moe_Router_Bwd_Args Router_Bwd_Args;

static void router_row(const Router_Args *a, int64_t t)
{
	const float *l = (const float *)a->logits + t * a->experts;
	float *p = a->probs + t * a->experts;
	float m = l[0], sum = 0.0f;
	for (int64_t e = 1; e < a->experts; e++)
		m = l[e] > m || isnan(l[e]) ? l[e] : m;
	for (int64_t e = 0; e < a->experts; e++) {
		p[e] = expf(l[e] - m);
		sum += p[e];
	}
	float inv = 1.0f / sum;
	Topk_Pair q[DATAFLOW_MOE_MAX_EXPERTS];
	for (int64_t e = 0; e < a->experts; e++) {
		p[e] *= inv;
		q[e] = (Topk_Pair){p[e], (int)e};
	}
	torch_topk(q, (int)a->experts, (int)a->top_k);
	float *w = a->topk_weights + t * a->top_k, s = 0.0f;
	for (int64_t j = 0; j < a->top_k; j++) {
		w[j] = q[j].value;
		a->topk_ids[t * a->top_k + j] = q[j].index;
		s += w[j];
	}
	if (a->norm_topk_prob)
		for (int64_t j = 0; j < a->top_k; j++)
			w[j] /= s;
}

static void router_bwd_row(const Router_Bwd_Args *a, int64_t t)
{
	const float *p = (const float *)a->probs + t * a->experts, *dw = a->d_topk_weights + t * a->top_k;
	const int32_t *ids = a->topk_ids + t * a->top_k;
	float *dl = a->d_logits + t * a->experts;
	memset(dl, 0, (size_t)a->experts * sizeof(float)); /* dp, then d_logits in place */
	float s = 0.0f, dot = 0.0f;
	for (int64_t j = 0; j < a->top_k; j++)
		if (ids[j] >= 0 && ids[j] < a->experts)
			s += p[ids[j]];
	for (int64_t j = 0; j < a->top_k; j++)
		if (ids[j] >= 0 && ids[j] < a->experts)
			dot += dw[j] * (p[ids[j]] / s);
	for (int64_t j = 0; j < a->top_k; j++)
		if (ids[j] >= 0 && ids[j] < a->experts)
			dl[ids[j]] += a->norm_topk_prob ? (dw[j] - dot) / s : dw[j];
	float pdp = 0.0f;
	for (int64_t e = 0; e < a->experts; e++)
		pdp += p[e] * dl[e];
	for (int64_t e = 0; e < a->experts; e++)
		dl[e] = p[e] * (dl[e] - pdp);
}

/* The kernel dataflow_host_<name>: row(&a, t) for each token t of the part. */
#define ROW_KERNEL(name, Args, unpack, row)                                                          \
	void dataflow_host_##name(void **args, int part, int num_parts)                              \
	{                                                                                            \
		Args a = unpack(args);                                                               \
		int64_t t, end;                                                                      \
		dataflow_part_range(a.tokens, part, num_parts, 1, &t, &end);                         \
		for (; t < end; t++)                                                                 \
			row(&a, t);                                                                  \
	}
ROW_KERNEL(moe_router_fp32, Router_Args, dataflow_moe_router_args, router_row)
ROW_KERNEL(moe_router_bwd_fp32, Router_Bwd_Args, dataflow_moe_router_bwd_args, router_bwd_row)

DATAFLOW_HOST_LAUNCH(dataflow_host_moe_router_launch, Router_Args, dataflow_moe_router_args,
		     dataflow_elementwise_parts(a.tokens, MIN_TOKENS))
DATAFLOW_HOST_LAUNCH(dataflow_host_moe_router_bwd_launch, Router_Bwd_Args, dataflow_moe_router_bwd_args,
		     dataflow_elementwise_parts(a.tokens, MIN_TOKENS))
