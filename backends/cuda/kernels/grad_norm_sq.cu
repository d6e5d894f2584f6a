// grad_norm_sq in two ops, the host's order exactly (fp64 accumulation, deterministic):
//   partials: workspace[b] = sum of x[i]^2 over block b of DATAFLOW_GRAD_NORM_BLOCK elements, in
//             16 lane accumulators acc[k] += x[i]^2 for i = k mod 16 in increasing i, folded
//             k + k+8, k + k+4, k + k+2, k + k+1 (x^2 of an fp32 is exact in fp64)
//   reduce:   out[0] = (accumulate ? out[0] : 0) + the partials summed in block order
// Partials: 16 threads per block of x, thread k keeping lane k; the fold is the host's tree.
// Reduce: one thread walks the partials in order, a warp prefetching them.
#include "dtype.cuh"
#include "op_params.cuh"

#define BLOCK DATAFLOW_GRAD_NORM_BLOCK
#define LANES 16

// Each warp does two blocks of x at a time (half-warps of 16 lanes, grid-stride), so every
// shuffle has the whole warp present.
template <class D> __device__ void partials(long long n, const typename D::T *x, double *workspace)
{
	const long long blocks = (n + BLOCK - 1) / BLOCK, warps = (long long)gridDim.x * (blockDim.x / 32);
	const long long warp = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	const int lane = threadIdx.x % LANES, half = (threadIdx.x / LANES) & 1;
	for (long long pair = 2 * warp; pair < blocks; pair += 2 * warps) {
		const long long b = pair + half, begin = b * BLOCK, end = begin + BLOCK < n ? begin + BLOCK : n;
		double acc = 0.0;
		for (long long i = begin + lane; b < blocks && i < end; i += LANES) {
			double v = (double)D::load(x[i]);
			acc += v * v;
		}
		// fold lanes w apart, w = 8, 4, 2, 1: lane k gets acc[k] + acc[k + w] (the host's order)
		for (int w = 8; w >= 1; w >>= 1)
			acc += __shfl_down_sync(0xffffffffu, acc, w, LANES);
		if (lane == 0 && b < blocks)
			workspace[b] = acc;
	}
}

// one warp: lanes load 32 partials at a time, lane 0 adds them in order
template <class O> __device__ void reduce(long long num_blocks, const double *workspace, O *out, int accumulate)
{
	double total = 0.0;
	for (long long b0 = 0; b0 < num_blocks; b0 += 32) {
		const long long b = b0 + threadIdx.x;
		const double v = b < num_blocks ? workspace[b] : 0.0;
		for (int k = 0; k < 32 && b0 + k < num_blocks; k++) {
			double vk = __shfl_sync(0xffffffffu, v, k);
			if (threadIdx.x == 0)
				total += vk;
		}
	}
	if (threadIdx.x == 0)
		out[0] = (O)(accumulate ? (double)out[0] + total : total);
}

extern "C" __global__ void dataflow_cuda_grad_norm_sq_partials_fp32(DATAFLOW_GRAD_NORM_SQ_PARTIALS_PARAMS(fp32_t))
{
	partials<Fp32>(n, x, workspace);
}

extern "C" __global__ void dataflow_cuda_grad_norm_sq_partials_bf16(DATAFLOW_GRAD_NORM_SQ_PARTIALS_PARAMS(bf16_t))
{
	partials<Bf16>(n, x, workspace);
}

extern "C" __global__ void dataflow_cuda_grad_norm_sq_reduce_fp32(DATAFLOW_GRAD_NORM_SQ_REDUCE_PARAMS(float))
{
	reduce(num_blocks, workspace, out, accumulate);
}

extern "C" __global__ void dataflow_cuda_grad_norm_sq_reduce_fp64(DATAFLOW_GRAD_NORM_SQ_REDUCE_PARAMS(double))
{
	reduce(num_blocks, workspace, out, accumulate);
}
