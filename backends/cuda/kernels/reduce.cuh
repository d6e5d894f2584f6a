// Block-wide reductions in a fixed order, so a result depends only on the block size (which
// launch functions choose from the shapes alone), never on timing: an xor-shuffle tree inside
// each warp, then the warps' values combined in warp order. blockDim.x must be a multiple of
// 32 (at most 1024); every thread receives the result. Each call begins with a barrier, so
// calls may follow each other.
#pragma once

// Online softmax statistics: (m, s) stands for s * exp(m - M) relative to any later max M.
struct Max_Sum {
	float m, s;
};

__device__ __forceinline__ float shfl_xor(float v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ double shfl_xor(double v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ Max_Sum shfl_xor(Max_Sum v, int o) { return {shfl_xor(v.m, o), shfl_xor(v.s, o)}; }

// The combining functions: each reduction's value is combine(mine, other's).
struct Add {
	template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct Max { // fmaxf: a NaN is passed over
	__device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Combine_Max_Sum {
	__device__ __forceinline__ Max_Sum operator()(Max_Sum a, Max_Sum b) const
	{
		float m = fmaxf(a.m, b.m);
		return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
	}
};

template <class T, class Combine> __device__ __forceinline__ T warp_reduce(T v, Combine combine)
{
	for (int o = 16; o > 0; o >>= 1)
		v = combine(v, shfl_xor(v, o));
	return v;
}

template <class T, class Combine> __device__ T block_reduce(T v, Combine combine)
{
	__shared__ T part[32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	v = warp_reduce(v, combine);
	__syncthreads(); // a previous call's readers are done with part
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	T total = part[0];
	for (int w = 1; w < warps; w++)
		total = combine(total, part[w]);
	return total;
}

template <class T> __device__ __forceinline__ T warp_sum(T v) { return warp_reduce(v, Add()); }
template <class T> __device__ T block_sum(T v) { return block_reduce(v, Add()); }
__device__ Max_Sum block_max_sum(Max_Sum v) { return block_reduce(v, Combine_Max_Sum()); }
// The largest value over the block; exact, so any order gives it.
__device__ float block_max(float v) { return block_reduce(v, Max()); }
