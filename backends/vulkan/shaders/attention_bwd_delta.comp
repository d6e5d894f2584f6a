#version 460
// attention_bwd_delta: D[h][t] = sum_k dout[t][h][k] * out[t][h][k], in order in fp32 (the
// host's bits); one invocation per (token, head) row.
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform Args { DATAFLOW_ATTENTION_BWD_DELTA_PARAMS(REF(DT_dtype)) } p;

void main()
{
	uint hq = uint(p.num_q_heads), d = uint(p.head_dim), total = uint(p.total_tokens);
	FOR_EACH_INDEX(r, total * hq) {
		precise float sum = 0.0;
		for (uint k = 0; k < d; k++)
			sum += LOAD(DT_dtype, p.dout.v[r * d + k]) * LOAD(DT_dtype, p.out_.v[r * d + k]);
		p.D.v[(r % hq) * total + r / hq] = sum;
	}
}
