#version 460
// moe_router_bwd: per token, in fp32 (as the host kernel): with p = probs[t], S = sum_j p[ids_j],
// dp[ids_j] = norm ? (dw_j - sum_i dw_i p[ids_i] / S) / S : dw_j, d_logits = p * (dp - p . dp).
// dp is built in d_logits' row. One invocation per token; an id outside [0, experts) is skipped
// (and never used as an address).
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform Args { DATAFLOW_MOE_ROUTER_BWD_PARAMS(REF(DT_dtype)) } p;

void main()
{
	uint E = uint(p.experts), K = uint(p.top_k);
	FOR_EACH_INDEX(t, p.tokens) {
		uint row = t * E;
		for (uint e = 0; e < E; e++)
			p.d_logits.v[row + e] = 0.0;
		precise float s = 0.0, dot = 0.0, pdp = 0.0;
		// an id's address is clamped into the row whether or not it is valid (compilers may load
		// before the test)
		for (uint j = 0; j < K; j++) {
			int id = p.topk_ids.v[t * K + j];
			float v = p.probs.v[row + uint(clamp(id, 0, int(E) - 1))];
			if (id >= 0 && id < int(E))
				s += v;
		}
		for (uint j = 0; j < K; j++) {
			int id = p.topk_ids.v[t * K + j];
			float v = p.probs.v[row + uint(clamp(id, 0, int(E) - 1))];
			if (id >= 0 && id < int(E))
				dot += p.d_topk_weights.v[t * K + j] * (v / s);
		}
		for (uint j = 0; j < K; j++) {
			int id = p.topk_ids.v[t * K + j];
			uint at = row + uint(clamp(id, 0, int(E) - 1));
			float dw = p.d_topk_weights.v[t * K + j];
			precise float dp = p.d_logits.v[at] + (p.norm_topk_prob != 0 ? (dw - dot) / s : dw);
			if (id >= 0 && id < int(E))
				p.d_logits.v[at] = dp;
		}
		for (uint e = 0; e < E; e++)
			pdp += p.probs.v[row + e] * p.d_logits.v[row + e];
		for (uint e = 0; e < E; e++) {
			precise float dl = p.probs.v[row + e] * (p.d_logits.v[row + e] - pdp);
			p.d_logits.v[row + e] = dl;
		}
	}
}
