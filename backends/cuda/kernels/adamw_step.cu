// adamw_step: one torch.optim.AdamW step in torch's _single_tensor_adam order, fp32 math, fma
// explicit where torch's kernels fuse (lerp, addcmul), as the host kernel:
//   g = grad * scale;  p = p * decay
//   m = lerp(m, g, w1) = fma(w1, g - m, m), or fma(w1 - 1, g - m, g) when w1 >= 0.5
//   v = fma(c2 * g, g, v * beta2)
//   p = p + (neg_step_size * m) / (sqrt(v) / bc2_sqrt + eps)
// The per-step constants are formed in double from the host's doubles and rounded once to
// fp32 (each thread, before its loop). master (fp32, with a bf16 param) holds p when given.
#include "dtype.cuh"
#include "op_params.cuh"

template <class P, class G>
__device__ void adamw(long long n, typename P::T *param, const typename G::T *grad, float *m, float *v, float *master,
		      const float *scale_ptr, double lr, double beta1, double beta2, double eps, double weight_decay,
		      long long step)
{
	const double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
	const float decay = (float)(1.0 - lr * weight_decay), w1 = (float)(1.0 - beta1), b2 = (float)beta2;
	const float c2 = (float)(1.0 - beta2), nss = (float)(-(lr / bc1)), bc2s = (float)sqrt(bc2), e = (float)eps;
	const bool lerp_small = fabsf(w1) < 0.5f;
	const float w = lerp_small ? w1 : w1 - 1.0f;
	const float scale = scale_ptr ? scale_ptr[0] : 1.0f;
	FOR_EACH_INDEX(i, n)
	{
		float g = G::load(grad[i]);
		if (scale != 1.0f)
			g = g * scale;
		float p = master ? master[i] : P::load(param[i]);
		p = p * decay;
		float mi = m[i], vi = v[i];
		mi = fmaf(w, g - mi, lerp_small ? mi : g);
		vi = fmaf(c2 * g, g, vi * b2);
		p = p + (nss * mi) / (sqrtf(vi) / bc2s + e);
		m[i] = mi;
		v[i] = vi;
		if (master)
			master[i] = p;
		param[i] = P::store(p);
	}
}

#define ADAMW(PD, PTAG, GD, GTAG)                                                                        \
	extern "C" __global__ void dataflow_cuda_adamw_step_##PD##_##GD(DATAFLOW_ADAMW_STEP_PARAMS(PD##_t, GD##_t)) \
	{                                                                                                \
		adamw<PTAG, GTAG>(n, param, grad, m, v, master, scale, lr, beta1, beta2, eps, weight_decay, step); \
	}

ADAMW(fp32, Fp32, fp32, Fp32)
ADAMW(fp32, Fp32, bf16, Bf16)
ADAMW(bf16, Bf16, fp32, Fp32)
ADAMW(bf16, Bf16, bf16, Bf16)
