#version 460
// adamw_step: torch.optim.AdamW in torch's _single_tensor_adam order, fp32, as the host
// kernel (backends/host/kernels/adamw_step.c):
//   g = grad * scale;  p = p * decay
//   m = lerp(m, g, w1) = fma(w1, g - m, m), or fma(w1 - 1, g - m, g) when w1 >= 0.5
//   v = fma(c2 * g, g, v * beta2)
//   p = p + (neg_step_size * m) / (sqrt(v) / bc2_sqrt + eps)
// The op runs as an external op (vulkan_default_ops.c) that forms the per-step constants in
// double on the host, as the host kernel does, and passes them rounded to fp32: this block,
// not the catalogue's, is its push-constant layout. master (fp32, may be 0) holds p when given;
// scale (may be 0) is a device fp32 [1].
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args {
	int64_t n;
	REF(DT_param_dtype) param;
	REF(DT_grad_dtype) grad;
	fp32_ref m;
	fp32_ref v;
	fp32_ref master;
	fp32_ref scale;
	float decay, w1, beta2, c2, neg_step_size, bc2_sqrt, eps;
	int lerp_small;
} p;

void main()
{
	bool has_master = uint64_t(p.master) != 0ul;
	float scale = uint64_t(p.scale) != 0ul ? p.scale.v[0] : 1.0;
	float w = p.lerp_small != 0 ? p.w1 : p.w1 - 1.0;
	FOR_EACH_INDEX(i, p.n) {
		precise float g = LOAD(DT_grad_dtype, p.grad.v[i]);
		if (scale != 1.0)
			g = g * scale;
		precise float x = has_master ? p.master.v[i] : LOAD(DT_param_dtype, p.param.v[i]);
		x = x * p.decay;
		precise float m = p.m.v[i], v = p.v.v[i];
		m = fma(w, g - m, p.lerp_small != 0 ? m : g);
		v = fma(p.c2 * g, g, v * p.beta2);
		x = x + (p.neg_step_size * m) / (sqrt(v) / p.bc2_sqrt + p.eps);
		p.m.v[i] = m;
		p.v.v[i] = v;
		if (has_master)
			p.master.v[i] = x;
		p.param.v[i] = STORE(DT_param_dtype, x);
	}
}
