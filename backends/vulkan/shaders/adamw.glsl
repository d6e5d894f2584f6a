// The AdamW update of adamw_step and its lean-state forms (adamw_step_bf16_state,
// adamw_step_8bit), in torch's _single_tensor_adam order, fp32, as the host kernels
// (backends/host/kernels/adamw_update.h):
//   g = grad * scale;  p = p * decay
//   m = lerp(m, g, w1) = fma(w1, g - m, m), or fma(w1 - 1, g - m, g) when w1 >= 0.5
//   v = fma(c2 * g, g, v * beta2)
//   p = p + (neg_step_size * m) / (sqrt(v) / bc2_sqrt + eps)
// The ops run as external ops (vulkan_default_ops.c) that form the per-step constants in
// double on the host, as the host kernel does, and pass them rounded to fp32 after the op's
// tensors and scalars: ADAMW_CONSTANTS is that tail of each kernel's push-constant block.
#define ADAMW_CONSTANTS float decay, w1, beta2, c2, neg_step_size, bc2_sqrt, eps; int lerp_small

// x (the master or the widened param), m, v updated in place from g; c: the push constants
#define ADAMW_UPDATE(c, g0, scale, x, m, v)                                                          \
	{                                                                                            \
		precise float g_ = g0;                                                               \
		if (scale != 1.0)                                                                    \
			g_ = g_ * scale;                                                             \
		precise float x_ = x * c.decay;                                                      \
		precise float m_ = fma(c.lerp_small != 0 ? c.w1 : c.w1 - 1.0, g_ - m, c.lerp_small != 0 ? m : g_); \
		precise float v_ = fma(c.c2 * g_, g_, v * c.beta2);                                  \
		x_ = x_ + (c.neg_step_size * m_) / (sqrt(v_) / c.bc2_sqrt + c.eps);                  \
		x = x_;                                                                              \
		m = m_;                                                                              \
		v = v_;                                                                              \
	}
