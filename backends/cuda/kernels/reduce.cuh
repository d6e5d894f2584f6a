// Block-wide reductions in a fixed order, so a result depends only on the block size (which
// launch functions choose from the shapes alone), never on timing: an xor-shuffle tree inside
// each warp, then the warps' values combined in warp order. blockDim.x must be a multiple of
// 32 (at most 1024); every thread receives the result. Each call begins with a barrier, so
// calls may follow each other.
#pragma once

__device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ double warp_sum(double v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

template <class T> __device__ T block_sum(T v)
{
	__shared__ T part[32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	v = warp_sum(v);
	__syncthreads(); // a previous call's readers are done with part
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	T total = part[0];
	for (int w = 1; w < warps; w++)
		total += part[w];
	return total;
}

// Online softmax statistics: (m, s) stands for s * exp(m - M) relative to any later max M.
struct Max_Sum {
	float m, s;
};

__device__ __forceinline__ Max_Sum max_sum_combine(Max_Sum a, Max_Sum b)
{
	float m = fmaxf(a.m, b.m);
	return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ Max_Sum block_max_sum(Max_Sum v)
{
	__shared__ Max_Sum part[32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	for (int o = 16; o > 0; o >>= 1) {
		Max_Sum other = {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
		v = max_sum_combine(v, other);
	}
	__syncthreads();
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	Max_Sum total = part[0];
	for (int w = 1; w < warps; w++)
		total = max_sum_combine(total, part[w]);
	return total;
}

// The largest value over the block (fmaxf: a NaN is passed over); exact, so any order gives it.
__device__ float block_max(float v)
{
	__shared__ float part[32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	__syncthreads();
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	float total = part[0];
	for (int w = 1; w < warps; w++)
		total = fmaxf(total, part[w]);
	return total;
}
