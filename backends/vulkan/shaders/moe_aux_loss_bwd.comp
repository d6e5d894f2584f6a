#version 460
// moe_aux_loss_bwd: g_e = d_loss * E * (stats[0, e] / R) / R, d_logits[t] += p[t] * (g - p[t] . g),
// one invocation per token.
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform Args { DATAFLOW_MOE_AUX_LOSS_BWD_PARAMS(REF(DT_dtype)) } p;

float g_of(uint e, float r) { return p.d_loss * float(p.experts) * (p.stats.v[e] / r) / r; }

void main()
{
	uint E = uint(p.experts);
	float r = float(p.rows);
	FOR_EACH_INDEX(t, p.tokens) {
		precise float pg = 0.0;
		for (uint e = 0; e < E; e++)
			pg += p.probs.v[t * E + e] * g_of(e, r);
		for (uint e = 0; e < E; e++) {
			precise float dl = p.d_logits.v[t * E + e] + p.probs.v[t * E + e] * (g_of(e, r) - pg);
			p.d_logits.v[t * E + e] = dl;
		}
	}
}
