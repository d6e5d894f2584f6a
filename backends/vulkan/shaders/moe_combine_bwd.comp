#version 460
// moe_combine_bwd: per (t, j) with s = slot_of[t, j]: d_y_perm[s] = w[t, j] * dy[t] (one
// rounding), d_topk_weights[t, j] = dy[t] . y_perm[s] in fp32, h in order; one invocation per
// (t, j). A slot outside [0, tokens * top_k) gets 0 and writes no row.
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform Args { DATAFLOW_MOE_COMBINE_BWD_PARAMS(REF(DT_dtype)) } p;

void main()
{
	uint H = uint(p.hidden), K = uint(p.top_k);
	int n = int(p.tokens * p.top_k);
	FOR_EACH_INDEX(i, p.tokens * p.top_k) {
		int s = p.slot_of.v[i];
		if (s < 0 || s >= n) {
			p.d_topk_weights.v[i] = 0.0;
			continue;
		}
		uint t = i / K, row = uint(clamp(s, 0, n - 1)) * H;
		float w = p.topk_weights.v[i];
		precise float dot = 0.0;
		for (uint c = 0; c < H; c++) {
			float g = LOAD(DT_dtype, p.dy.v[t * H + c]);
			p.d_y_perm.v[row + c] = STORE(DT_dtype, w * g);
			dot += g * LOAD(DT_dtype, p.y_perm.v[row + c]);
		}
		p.d_topk_weights.v[i] = dot;
	}
}
