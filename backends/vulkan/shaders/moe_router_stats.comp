#version 460
// moe_router_stats: stats[0, e] += count of e in topk_ids, stats[1, e] += sum_t probs[t, e],
// one invocation per expert walking the tokens in order (the host's order).
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform Args { DATAFLOW_MOE_ROUTER_STATS_PARAMS(REF(DT_dtype)) } p;

void main()
{
	uint E = uint(p.experts);
	FOR_EACH_INDEX(e, E) {
		precise float count = 0.0, sum = 0.0;
		for (uint i = 0; i < uint(p.tokens * p.top_k); i++)
			count += p.topk_ids.v[i] == int(e) ? 1.0 : 0.0;
		for (uint t = 0; t < uint(p.tokens); t++)
			sum += p.probs.v[t * E + e];
		p.stats.v[e] = p.stats.v[e] + count;
		p.stats.v[E + e] = p.stats.v[E + e] + sum;
	}
}
