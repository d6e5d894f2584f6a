#version 460
// moe_aux_loss: loss = E * sum_e (stats[0, e] / R) * (stats[1, e] / R), one invocation.
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 1) in;
layout(push_constant) uniform Args { DATAFLOW_MOE_AUX_LOSS_PARAMS(REF(DT_dtype)) } p;

void main()
{
	uint E = uint(p.experts);
	float r = float(p.rows);
	precise float sum = 0.0;
	for (uint e = 0; e < E; e++)
		sum += (p.stats.v[e] / r) * (p.stats.v[E + e] / r);
	p.loss.v[0] = sum * float(E);
}
