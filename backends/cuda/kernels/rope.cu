// rope (Hugging Face Llama rotate_half) and rope_bwd (the inverse rotation: s negated, which
// is exact). With a = positions[t] * inv_freq[i], c = cos(a), s = sin(a), d = head_dim / 2:
//   out[i]     = x[i] * c - x[i + d] * s
//   out[i + d] = x[i + d] * c + x[i] * s
// One thread per (token, i): sincosf once, then every head of the token. Each pair is read
// before the same thread writes it, so out may equal x.
#include "dtype.cuh"
#include "op_params.cuh"

template <class D>
__device__ void rope(long long num_tokens, long long num_heads, long long head_dim, const int *positions,
		     const float *inv_freq, const typename D::T *x, typename D::T *out, float sign)
{
	const long long d = head_dim / 2;
	FOR_EACH_INDEX(idx, num_tokens * d)
	{
		const long long t = idx / d, i = idx % d;
		float s, c;
		sincosf((float)positions[t] * inv_freq[i], &s, &c);
		s *= sign;
		for (long long h = 0; h < num_heads; h++) {
			const long long base = (t * num_heads + h) * head_dim;
			float x1 = D::load(x[base + i]), x2 = D::load(x[base + d + i]);
			out[base + i] = D::store(x1 * c - x2 * s);
			out[base + d + i] = D::store(x2 * c + x1 * s);
		}
	}
}

#define ROPE(DT, TAG)                                                                                    \
	extern "C" __global__ void dataflow_cuda_rope_##DT(DATAFLOW_ROPE_PARAMS(DT##_t))                  \
	{                                                                                                \
		rope<TAG>(num_tokens, num_heads, head_dim, positions, inv_freq, x, out, 1.0f);              \
	}                                                                                                \
	extern "C" __global__ void dataflow_cuda_rope_bwd_##DT(DATAFLOW_ROPE_BWD_PARAMS(DT##_t))          \
	{                                                                                                \
		rope<TAG>(num_tokens, num_heads, head_dim, positions, inv_freq, dy, dx, -1.0f);             \
	}

ROPE(fp32, Fp32)
ROPE(fp16, Fp16)
ROPE(bf16, Bf16)
