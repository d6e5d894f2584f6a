/* The load-balancing loss of HF's load_balancing_loss_func over every layer's routing:
 *   moe_router_stats:  stats[0, e] += count of e in topk_ids,  stats[1, e] += sum_t probs[t, e]
 *   moe_aux_loss:      loss = E * sum_e (stats[0, e] / R) * (stats[1, e] / R)
 *   moe_aux_loss_bwd:  g_e = d_loss * E * stats[0, e] / R^2,  dl[t] += p[t] * (g - p[t] . g)
 * The stats parts own expert ranges and walk every token in order, so each sum has one order
 * whatever the thread count; the backward's parts own token ranges. */
#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "dataflow/ops.h"

#define MIN_TOKENS 64
#define MIN_STATS_ELEMENTS 16384

typedef Dataflow_Moe_Router_Stats_Args Stats_Args;
typedef Dataflow_Moe_Aux_Loss_Args Loss_Args;
typedef Dataflow_Moe_Aux_Loss_Bwd_Args Loss_Bwd_Args;

void dataflow_host_moe_router_stats_fp32(void **args, int part, int num_parts)
{
	Stats_Args a = dataflow_moe_router_stats_args(args);
	int64_t e0, e1;
	dataflow_part_range(a.experts, part, num_parts, 1, &e0, &e1);
	const float *p = a.probs;
	for (int64_t i = 0; i < a.tokens * a.top_k; i++)
		if (a.topk_ids[i] >= e0 && a.topk_ids[i] < e1)
			a.stats[a.topk_ids[i]] += 1.0f;
	for (int64_t t = 0; t < a.tokens; t++)
		for (int64_t e = e0; e < e1; e++)
			a.stats[a.experts + e] += p[t * a.experts + e];
}

DATAFLOW_HOST_LAUNCH(dataflow_host_moe_router_stats_launch, Stats_Args, dataflow_moe_router_stats_args,
		     dataflow_parts_at_most(dataflow_elementwise_parts(a.tokens * a.experts, MIN_STATS_ELEMENTS),
					    a.experts))

void dataflow_host_moe_aux_loss_fp32(void **args, int part, int num_parts)
{
	(void)part, (void)num_parts;
	Loss_Args a = dataflow_moe_aux_loss_args(args);
	const float *s = a.stats;
	float rows = (float)a.rows, sum = 0.0f;
	for (int64_t e = 0; e < a.experts; e++)
		sum += (s[e] / rows) * (s[a.experts + e] / rows);
	a.loss[0] = sum * (float)a.experts;
}

DATAFLOW_HOST_ONE_PART_LAUNCH(dataflow_host_moe_aux_loss_launch)

void dataflow_host_moe_aux_loss_bwd_fp32(void **args, int part, int num_parts)
{
	Loss_Bwd_Args a = dataflow_moe_aux_loss_bwd_args(args);
	const float *s = a.stats;
	float g[DATAFLOW_MOE_MAX_EXPERTS], rows = (float)a.rows;
	for (int64_t e = 0; e < a.experts; e++)
		g[e] = a.d_loss * (float)a.experts * (s[e] / rows) / rows;
	int64_t t, end;
	dataflow_part_range(a.tokens, part, num_parts, 1, &t, &end);
	for (; t < end; t++) {
		const float *p = a.probs + t * a.experts;
		float *dl = a.d_logits + t * a.experts, pg = 0.0f;
		for (int64_t e = 0; e < a.experts; e++)
			pg += p[e] * g[e];
		for (int64_t e = 0; e < a.experts; e++)
			dl[e] += p[e] * (g[e] - pg);
	}
}

DATAFLOW_HOST_LAUNCH(dataflow_host_moe_aux_loss_bwd_launch, Loss_Bwd_Args, dataflow_moe_aux_loss_bwd_args,
		     dataflow_elementwise_parts(a.tokens, MIN_TOKENS))
