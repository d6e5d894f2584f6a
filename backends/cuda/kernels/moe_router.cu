// moe_router, moe_router_bwd and moe_router_stats, in fp32, as the host kernels:
//   router:  p = softmax(l) (m = max, e = exp(l - m), p = e * (1 / sum e)), ids = torch.topk(p, k)
//            in torch's CPU order (torch_topk.cuh, shared with the host), w = p[ids] (/ sum)
//   bwd:     dp[ids_j] = norm ? (dw_j - sum_i dw_i w_i) / S : dw_j,  dl = p * (dp - sum(p * dp))
//   stats:   stats[0, e] += count of e in ids,  stats[1, e] += sum_t p[t, e]  (token order)
// One thread per token (experts are few; the pairs live in local memory), one per expert for
// the stats, so every sum has one order.
#include "convert.cuh"
#include "op_params.cuh"
#include "torch_topk.cuh"

extern "C" __global__ void dataflow_cuda_moe_router_fp32(DATAFLOW_MOE_ROUTER_PARAMS(fp32_t))
{
	FOR_EACH_INDEX(t, tokens)
	{
		const float *l = logits + t * experts;
		float *p = probs + t * experts, m = l[0], sum = 0.0f;
		for (int e = 1; e < experts; e++)
			m = l[e] > m || isnan(l[e]) ? l[e] : m;
		for (int e = 0; e < experts; e++) {
			p[e] = expf(l[e] - m);
			sum += p[e];
		}
		const float inv = 1.0f / sum;
		Topk_Pair q[DATAFLOW_MOE_MAX_EXPERTS];
		for (int e = 0; e < experts; e++) {
			p[e] *= inv;
			q[e].value = p[e];
			q[e].index = e;
		}
		torch_topk(q, (int)experts, (int)top_k);
		float *w = topk_weights + t * top_k, s = 0.0f;
		for (int j = 0; j < top_k; j++) {
			w[j] = q[j].value;
			topk_ids[t * top_k + j] = q[j].index;
			s += w[j];
		}
		if (norm_topk_prob)
			for (int j = 0; j < top_k; j++)
				w[j] /= s;
	}
}

extern "C" __global__ void dataflow_cuda_moe_router_bwd_fp32(DATAFLOW_MOE_ROUTER_BWD_PARAMS(fp32_t))
{
	FOR_EACH_INDEX(t, tokens)
	{
		const float *p = probs + t * experts, *dw = d_topk_weights + t * top_k;
		const int *ids = topk_ids + t * top_k;
		float *dl = d_logits + t * experts, s = 0.0f, dot = 0.0f, pdp = 0.0f;
		for (int e = 0; e < experts; e++)
			dl[e] = 0.0f;
		for (int j = 0; j < top_k; j++)
			if (ids[j] >= 0 && ids[j] < experts)
				s += p[ids[j]];
		for (int j = 0; j < top_k; j++)
			if (ids[j] >= 0 && ids[j] < experts)
				dot += dw[j] * (p[ids[j]] / s);
		for (int j = 0; j < top_k; j++)
			if (ids[j] >= 0 && ids[j] < experts)
				dl[ids[j]] += norm_topk_prob ? (dw[j] - dot) / s : dw[j];
		for (int e = 0; e < experts; e++)
			pdp += p[e] * dl[e];
		for (int e = 0; e < experts; e++)
			dl[e] = p[e] * (dl[e] - pdp);
	}
}

extern "C" __global__ void dataflow_cuda_moe_router_stats_fp32(DATAFLOW_MOE_ROUTER_STATS_PARAMS(fp32_t))
{
	FOR_EACH_INDEX(e, experts)
	{
		float count = 0.0f, sum = 0.0f;
		for (long long i = 0; i < tokens * top_k; i++)
			count += topk_ids[i] == e ? 1.0f : 0.0f;
		for (long long t = 0; t < tokens; t++)
			sum += probs[t * experts + e];
		stats[e] += count;
		stats[experts + e] += sum;
	}
}
