#version 460
// moe_combine: y[t, h] = sum_j w[t, j] * y_perm[s_j, h] in fp32, j in order, one rounding
// (w = 1 when topk_weights is NULL); one invocation per element of y. A slot outside
// [0, tokens * top_k) contributes nothing (its address is clamped: compilers may load first).
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args { DATAFLOW_MOE_COMBINE_PARAMS(REF(DT_dtype)) } p;

void main()
{
	uint H = uint(p.hidden), K = uint(p.top_k);
	int n = int(p.tokens * p.top_k);
	bool weighted = uint64_t(p.topk_weights) != 0ul;
	FOR_EACH_INDEX(i, p.tokens * p.hidden) {
		uint t = i / H, c = i % H;
		precise float acc = 0.0;
		for (uint j = 0; j < K; j++) {
			int s = p.slot_of.v[t * K + j];
			float v = LOAD(DT_dtype, p.y_perm.v[uint(clamp(s, 0, n - 1)) * H + c]);
			float w = weighted ? p.topk_weights.v[t * K + j] : 1.0;
			if (s >= 0 && s < n)
				acc += w * v;
		}
		p.y.v[i] = STORE(DT_dtype, acc);
	}
}
