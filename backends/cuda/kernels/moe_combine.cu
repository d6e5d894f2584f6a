// moe_combine and moe_combine_bwd, in fp32, as the host kernels:
//   forward:  y[t, h] = sum_j w[t, j] * y_perm[s_j, h]  (j in order, one rounding; w = 1 when NULL)
//   backward: d_y_perm[s_j, h] = w[t, j] * dy[t, h],  d_w[t, j] = dy[t] . y_perm[s_j]
// The forward is one thread per output element; the backward one warp per (t, j), the lanes
// striding over h and their dot products summed by warp_sum (a fixed order). A slot outside
// [0, tokens * top_k) contributes nothing.
#include "dtype.cuh"
#include "op_params.cuh"
#include "reduce.cuh"

template <class D>
__device__ void moe_combine(long long tokens, long long top_k, long long hidden, const typename D::T *y_perm,
			    const int *slot_of, const float *topk_weights, typename D::T *y)
{
	const long long n = tokens * top_k;
	FOR_EACH_INDEX(i, tokens * hidden)
	{
		const long long t = i / hidden, c = i % hidden;
		float acc = 0.0f;
		for (long long j = 0; j < top_k; j++) {
			const int s = slot_of[t * top_k + j];
			if (s >= 0 && s < n)
				acc += (topk_weights ? topk_weights[t * top_k + j] : 1.0f) * D::load(y_perm[s * hidden + c]);
		}
		y[i] = D::store(acc);
	}
}

template <class D>
__device__ void moe_combine_bwd(long long tokens, long long top_k, long long hidden, const typename D::T *dy,
				const typename D::T *y_perm, const int *slot_of, const float *topk_weights,
				typename D::T *d_y_perm, float *d_topk_weights)
{
	const long long n = tokens * top_k, warps = (long long)gridDim.x * (blockDim.x / 32);
	const int lane = threadIdx.x & 31;
	for (long long i = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; i < n; i += warps) {
		const long long t = i / top_k;
		const int s = slot_of[i];
		if (s < 0 || s >= n) {
			if (lane == 0)
				d_topk_weights[i] = 0.0f;
			continue;
		}
		const float w = topk_weights[i];
		float dot = 0.0f;
		for (long long c = lane; c < hidden; c += 32) {
			const float g = D::load(dy[t * hidden + c]);
			d_y_perm[s * hidden + c] = D::store(w * g);
			dot += g * D::load(y_perm[s * hidden + c]);
		}
		dot = warp_sum(dot);
		if (lane == 0)
			d_topk_weights[i] = dot;
	}
}

#define MOE_COMBINE(DT, TAG)                                                                                  \
	extern "C" __global__ void dataflow_cuda_moe_combine_##DT(DATAFLOW_MOE_COMBINE_PARAMS(DT##_t))        \
	{                                                                                                     \
		moe_combine<TAG>(tokens, top_k, hidden, y_perm, slot_of, topk_weights, y);                    \
	}                                                                                                     \
	extern "C" __global__ void dataflow_cuda_moe_combine_bwd_##DT(DATAFLOW_MOE_COMBINE_BWD_PARAMS(DT##_t)) \
	{                                                                                                     \
		moe_combine_bwd<TAG>(tokens, top_k, hidden, dy, y_perm, slot_of, topk_weights, d_y_perm,      \
				     d_topk_weights);                                                         \
	}

MOE_COMBINE(fp32, Fp32)
MOE_COMBINE(fp16, Fp16)
MOE_COMBINE(bf16, Bf16)
