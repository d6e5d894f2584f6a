// adamw_step and its lean-state forms (adamw_step_bf16_state, adamw_step_8bit): one
// torch.optim.AdamW update in torch's _single_tensor_adam order, fp32 math, fma explicit where
// torch's kernels fuse (lerp, addcmul), as the host kernels (backends/host/kernels/adamw_update.h):
//   g = grad * scale;  p = p * decay
//   m = lerp(m, g, w1) = fma(w1, g - m, m), or fma(w1 - 1, g - m, g) when w1 >= 0.5
//   v = fma(c2 * g, g, v * beta2)
//   p = p + (neg_step_size * m) / (sqrt(v) / bc2_sqrt + eps)
// The per-step constants are formed in double from the host's doubles and rounded once to
// fp32 (each thread, before its loop). master (fp32, with a bf16 param) holds p when given.
// The state is stored fp32, bf16 with stochastic rounding, or blockwise 8-bit (the catalogue's
// docs have the exact rules; these kernels follow them word for word).
#include "dtype.cuh"
#include "op_params.cuh"
#include "reduce.cuh"

struct Adamw {
	float scale, decay, w, b2, c2, nss, bc2s, e;
	bool lerp_small;

	__device__ Adamw(const float *scale_ptr, double lr, double beta1, double beta2, double eps, double weight_decay,
			 long long step)
	{
		const double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
		const float w1 = (float)(1.0 - beta1);
		lerp_small = fabsf(w1) < 0.5f;
		w = lerp_small ? w1 : w1 - 1.0f;
		decay = (float)(1.0 - lr * weight_decay);
		b2 = (float)beta2;
		c2 = (float)(1.0 - beta2);
		nss = (float)(-(lr / bc1));
		bc2s = (float)sqrt(bc2);
		e = (float)eps;
		scale = scale_ptr ? scale_ptr[0] : 1.0f;
	}

	// p (the master or the widened param), m, v updated in place from g
	__device__ __forceinline__ void update(float g, float &p, float &m, float &v) const
	{
		if (scale != 1.0f)
			g = __fmul_rn(g, scale);
		p = __fmul_rn(p, decay);
		m = fmaf(w, __fsub_rn(g, m), lerp_small ? m : g);
		v = fmaf(__fmul_rn(c2, g), g, __fmul_rn(v, b2));
		p = __fadd_rn(p, __fdiv_rn(__fmul_rn(nss, m), __fadd_rn(__fdiv_rn(sqrtf(v), bc2s), e)));
	}
};

template <class P, class G>
__device__ __forceinline__ float adamw_element(const Adamw &a, long long i, typename P::T *param,
					       const typename G::T *grad, float *master, float &m, float &v)
{
	float p = master ? master[i] : P::load(param[i]);
	a.update(G::load(grad[i]), p, m, v);
	if (master)
		master[i] = p;
	param[i] = P::store(p);
	return p;
}

// ---- fp32 state ----
template <class P, class G>
__device__ void adamw(DATAFLOW_ADAMW_STEP_PARAMS(typename P::T, typename G::T))
{
	const Adamw a(scale, lr, beta1, beta2, eps, weight_decay, step);
	FOR_EACH_INDEX(i, n)
	{
		float mi = m[i], vi = v[i];
		adamw_element<P, G>(a, i, param, grad, master, mi, vi);
		m[i] = mi;
		v[i] = vi;
	}
}

// ---- bf16 state, stochastic rounding ----
__device__ __forceinline__ unsigned sr_mix(unsigned x)
{
	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	x ^= x >> 16;
	return x;
}

// x rounded to bf16 by the random word r (NaN: to nearest even)
__device__ __forceinline__ bf16_t sr_bf16(float x, unsigned r)
{
	if (isnan(x))
		return store_bf16(x);
	return (bf16_t)((__float_as_uint(x) + (r & 0xffffu)) >> 16);
}

__device__ __forceinline__ unsigned sr_word(unsigned key, long long i)
{
	return sr_mix(sr_mix((unsigned)i ^ key) + (unsigned)((unsigned long long)i >> 32));
}

template <class P, class G>
__device__ void adamw_bf16_state(DATAFLOW_ADAMW_STEP_BF16_STATE_PARAMS(typename P::T, typename G::T))
{
	const Adamw a(scale, lr, beta1, beta2, eps, weight_decay, step);
	const unsigned long long s = (unsigned long long)step;
	const unsigned key = sr_mix((unsigned)seed ^
				    sr_mix((unsigned)(seed >> 32) ^ sr_mix((unsigned)s ^ sr_mix((unsigned)(s >> 32)))));
	const unsigned key_m = sr_mix(key ^ 1u), key_v = sr_mix(key ^ 2u);
	FOR_EACH_INDEX(i, n)
	{
		float mi = load_bf16(m[i]), vi = load_bf16(v[i]);
		adamw_element<P, G>(a, i, param, grad, master, mi, vi);
		m[i] = sr_bf16(mi, sr_word(key_m, i));
		v[i] = sr_bf16(vi, sr_word(key_v, i));
	}
}

// ---- blockwise 8-bit state: one thread block of DATAFLOW_ADAMW_8BIT_BLOCK threads per
// quantization block (grid-stride over blocks); the block's absmax by block_max ----
__device__ __forceinline__ unsigned char nearest_code(const float *q, float absmax, float x)
{
	int lo = 0, hi = DATAFLOW_ADAMW_8BIT_CODES - 1;
	while (lo < hi) {
		int mid = (lo + hi) >> 1;
		if (x > __fmul_rn(__fmul_rn(__fadd_rn(q[mid], q[mid + 1]), 0.5f), absmax))
			lo = mid + 1;
		else
			hi = mid;
	}
	return (unsigned char)lo;
}

template <class P, class G>
__device__ void adamw_8bit(DATAFLOW_ADAMW_STEP_8BIT_PARAMS(typename P::T, typename G::T))
{
	const Adamw a(scale, lr, beta1, beta2, eps, weight_decay, step);
	const long long blocks = (n + DATAFLOW_ADAMW_8BIT_BLOCK - 1) / DATAFLOW_ADAMW_8BIT_BLOCK;
	for (long long k = blockIdx.x; k < blocks; k += gridDim.x) {
		const long long i = k * DATAFLOW_ADAMW_8BIT_BLOCK + threadIdx.x;
		const bool live = i < n;
		float mi = 0.0f, vi = 0.0f;
		if (live) {
			mi = __fmul_rn(qmap_m[m[i]], m_absmax[k]);
			vi = __fmul_rn(qmap_v[v[i]], v_absmax[k]);
			adamw_element<P, G>(a, i, param, grad, master, mi, vi);
		}
		const float ma = block_max(live ? fabsf(mi) : 0.0f);
		const float va = block_max(live ? fabsf(vi) : 0.0f);
		if (live) {
			m[i] = nearest_code(qmap_m, ma, mi);
			v[i] = nearest_code(qmap_v, va, vi);
		}
		__syncthreads(); // every thread has read this block's absmax before it is overwritten
		if (threadIdx.x == 0) {
			m_absmax[k] = ma;
			v_absmax[k] = va;
		}
	}
}

#define ADAMW(PD, PTAG, GD, GTAG)                                                                        \
	extern "C" __global__ void dataflow_cuda_adamw_step_##PD##_##GD(DATAFLOW_ADAMW_STEP_PARAMS(PD##_t, GD##_t)) \
	{                                                                                                \
		adamw<PTAG, GTAG>(n, param, grad, m, v, master, scale, lr, beta1, beta2, eps, weight_decay, step); \
	}                                                                                                \
	extern "C" __global__ void dataflow_cuda_adamw_step_bf16_state_##PD##_##GD(                        \
		DATAFLOW_ADAMW_STEP_BF16_STATE_PARAMS(PD##_t, GD##_t))                                      \
	{                                                                                                \
		adamw_bf16_state<PTAG, GTAG>(n, param, grad, m, v, master, scale, lr, beta1, beta2, eps,   \
					     weight_decay, step, seed);                                   \
	}                                                                                                \
	extern "C" __global__ void dataflow_cuda_adamw_step_8bit_##PD##_##GD(DATAFLOW_ADAMW_STEP_8BIT_PARAMS(PD##_t, GD##_t)) \
	{                                                                                                \
		adamw_8bit<PTAG, GTAG>(n, param, grad, m, v, m_absmax, v_absmax, qmap_m, qmap_v, master, scale, lr, \
				       beta1, beta2, eps, weight_decay, step);                             \
	}

ADAMW(fp32, Fp32, fp32, Fp32)
ADAMW(fp32, Fp32, bf16, Bf16)
ADAMW(bf16, Bf16, fp32, Fp32)
ADAMW(bf16, Bf16, bf16, Bf16)
