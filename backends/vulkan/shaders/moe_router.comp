#version 460
// moe_router, in fp32 as the host kernel (with exp.glsl's exp, the host SIMD kernels' steps):
// p = softmax(l) (m = max, e = exp(l - m), p = e * (1 / sum e)), ids = torch.topk(p, k) in
// torch's CPU order (torch_topk.cuh, the host's and cuda's text), w = p[ids] (/ their sum when
// norm_topk_prob). One invocation per token; the pairs are its private array q.
#include "common.glsl"
#include "exp.glsl"
#include "op_params.glsl"
#include "torch_topk.cuh"
layout(local_size_x = 64) in;
layout(push_constant) uniform Args { DATAFLOW_MOE_ROUTER_PARAMS(REF(DT_dtype)) } p;

void main()
{
	int E = int(p.experts), K = int(p.top_k);
	FOR_EACH_INDEX(t, p.tokens) {
		uint row = t * uint(E);
		float m = p.logits.v[row];
		for (int e = 1; e < E; e++) {
			float l = p.logits.v[row + uint(e)];
			m = l > m || isnan(l) ? l : m;
		}
		precise float sum = 0.0;
		for (int e = 0; e < E; e++) {
			float x = exp_nonpos(p.logits.v[row + uint(e)] - m);
			p.probs.v[row + uint(e)] = x;
			sum += x;
		}
		float inv = 1.0 / sum;
		for (int e = 0; e < E; e++) {
			precise float pe = p.probs.v[row + uint(e)] * inv;
			p.probs.v[row + uint(e)] = pe;
			q[e].value = pe;
			q[e].index = e;
		}
		torch_topk(E, K);
		precise float s = 0.0;
		for (int j = 0; j < K; j++) {
			s += q[j].value;
			p.topk_ids.v[t * uint(K) + uint(j)] = q[j].index;
		}
		for (int j = 0; j < K; j++)
			p.topk_weights.v[t * uint(K) + uint(j)] = p.norm_topk_prob != 0 ? q[j].value / s : q[j].value;
	}
}
