#version 460
// cross_entropy fused with softmax, per row (token) t, the host kernel's order
// (backends/host/kernels/cross_entropy.c):
//   M = max_j x_j,  S = sum_j exp(x_j - M),  loss = (M + log S) - x[label]
//   dlogits_j = exp(x_j - M) * (scale / S), and (exp(x_l - M) * (1 / S) - 1) * scale at the label
// One workgroup per row (grid-stride): lane l keeps the running max and sum of the elements
// j = l mod 32 in order (s *= exp(m - x) when x > m, then s += exp(x - m); m starts at
// -FLT_MAX), lane 0 combines the lanes in lane order, then every lane writes its elements.
// A row whose label is ignore_index or outside [0, vocab) gets loss 0 and zero gradients.
// dlogits may be logits: x[label] is read before the barrier that precedes the writes.
#include "common.glsl"
#include "op_params.glsl"
#include "exp.glsl"
#define LANES 32
layout(local_size_x = LANES) in;
layout(push_constant) uniform Args { DATAFLOW_CROSS_ENTROPY_PARAMS(REF(DT_dtype)) } p;

shared float lane_m[LANES], lane_s[LANES];
shared float row_m, row_rs, row_xl;

void main()
{
	uint l = gl_LocalInvocationID.x, n = uint(p.vocab);
	for (uint r = gl_WorkGroupID.x; r < uint(p.tokens); r += gl_NumWorkGroups.x) {
		uint o = r * n;
		int label = p.labels.v[r];
		if (label == p.ignore_index || label < 0 || int64_t(label) >= p.vocab) {
			if (l == 0)
				p.loss.v[r] = 0.0;
			for (uint j = l; j < n; j += LANES)
				p.dlogits.v[o + j] = STORE(DT_dtype, 0.0);
			continue; // label is uniform in the workgroup: all lanes skip the barriers alike
		}
		precise float m = -3.402823466e38, s = 0.0;
		for (uint j = l; j < n; j += LANES) {
			precise float x = LOAD(DT_dtype, p.logits.v[o + j]);
			if (x > m) {
				s *= exp_nonpos(m - x);
				m = x;
			}
			s += exp_nonpos(x - m);
		}
		lane_m[l] = m;
		lane_s[l] = s;
		barrier();
		if (l == 0) {
			precise float M = lane_m[0], S = 0.0;
			for (int k = 1; k < LANES; k++)
				M = lane_m[k] > M ? lane_m[k] : M;
			for (int k = 0; k < LANES; k++)
				S += lane_s[k] * exp_nonpos(lane_m[k] - M);
			float xl = LOAD(DT_dtype, p.logits.v[o + uint(label)]);
			precise float loss = (M + log(S)) - xl;
			p.loss.v[r] = loss;
			row_m = M;
			row_rs = 1.0 / S;
			row_xl = xl;
		}
		barrier();
		precise float M = row_m, rs = row_rs, c = rs * p.scale;
		for (uint j = l; j < n; j += LANES) {
			precise float g = j == uint(label) ? (exp_nonpos(row_xl - M) * rs - 1.0) * p.scale
							   : exp_nonpos(LOAD(DT_dtype, p.logits.v[o + j]) - M) * c;
			p.dlogits.v[o + j] = STORE(DT_dtype, g);
		}
	}
}
