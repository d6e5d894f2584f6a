// cross_entropy fused with softmax, one block per token row (grid-stride), fp32 math:
//   M = max_j x_j,  S = sum_j exp(x_j - M),  loss = (M + log S) - x[label]
//   dlogits_j = exp(x_j - M) * (scale / S),  dlogits_label = (exp(x_label - M) / S - 1) * scale
// (the host's formulas). Pass 1: each thread keeps an online (max, sum) over its elements
// (rescaling its sum only when its max grows; the max starts at -FLT_MAX so -inf logits add
// 0), block_max_sum combines them in a fixed tree. x[label] is read before the barrier, and
// pass 2 reads each element before the same thread writes it: dlogits may be logits. A row
// whose label is ignore_index or outside [0, vocab) gets loss 0 and a zero gradient row.
#include "dtype.cuh"
#include "op_params.cuh"
#include "reduce.cuh"

#define FLT_MAX_ 3.402823466e+38f

__device__ __forceinline__ void online(Max_Sum &a, float x)
{
	if (x > a.m) {
		a.s *= expf(a.m - x);
		a.m = x;
	}
	a.s += expf(x - a.m);
}

template <class D>
__device__ void cross_entropy(long long tokens, long long vocab, int ignore_index, float scale, const typename D::T *logits,
			      const int *labels, float *loss, typename D::T *dlogits)
{
	typedef Vec<D> V;
	const bool vec = vec_ok<D>(vocab, logits, dlogits);
	for (long long r = blockIdx.x; r < tokens; r += gridDim.x) {
		const typename D::T *x = logits + r * vocab;
		typename D::T *g = dlogits + r * vocab;
		const long long label = labels[r];
		if (label == ignore_index || label < 0 || label >= vocab) {
			for (long long j = threadIdx.x; j < vocab; j += blockDim.x)
				g[j] = D::store(0.0f);
			if (threadIdx.x == 0)
				loss[r] = 0.0f;
			continue;
		}
		Max_Sum a = {-FLT_MAX_, 0.0f};
		if (vec) {
			for (long long j = threadIdx.x * V::N; j < vocab; j += blockDim.x * V::N) {
				V v;
				v.load(x + j);
				for (int k = 0; k < V::N; k++)
					online(a, v.get(k));
			}
		} else {
			for (long long j = threadIdx.x; j < vocab; j += blockDim.x)
				online(a, D::load(x[j]));
		}
		const float xl = D::load(x[label]); // every thread, before the barrier in block_max_sum
		const Max_Sum t = block_max_sum(a);
		const float rs = 1.0f / t.s, c = rs * scale, gl = (expf(xl - t.m) * rs - 1.0f) * scale;
		if (threadIdx.x == 0)
			loss[r] = (t.m + logf(t.s)) - xl;
		if (vec) {
			for (long long j = threadIdx.x * V::N; j < vocab; j += blockDim.x * V::N) {
				V v, o;
				v.load(x + j);
				for (int k = 0; k < V::N; k++)
					o.set(k, j + k == label ? gl : expf(v.get(k) - t.m) * c);
				o.store(g + j);
			}
		} else {
			for (long long j = threadIdx.x; j < vocab; j += blockDim.x)
				g[j] = D::store(j == label ? gl : expf(D::load(x[j]) - t.m) * c);
		}
	}
}

#define CROSS_ENTROPY(DT, TAG)                                                                           \
	extern "C" __global__ void dataflow_cuda_cross_entropy_##DT(DATAFLOW_CROSS_ENTROPY_PARAMS(DT##_t)) \
	{                                                                                                \
		cross_entropy<TAG>(tokens, vocab, ignore_index, scale, logits, labels, loss, dlogits);     \
	}

CROSS_ENTROPY(fp32, Fp32)
CROSS_ENTROPY(fp16, Fp16)
CROSS_ENTROPY(bf16, Bf16)
