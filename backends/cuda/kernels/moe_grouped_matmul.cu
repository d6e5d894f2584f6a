// moe_grouped_matmul and moe_grouped_matmul_bwd_w: each expert's matmul over its rows, fp32
// accumulation, one rounding (as the host's, which runs one blocked matmul per expert):
//   forward / d_x:  out[r] = x[r] @ op(W[e])            for o[e] <= r < o[e + 1]
//   d_w:            d_w[e] += dy[o[e]:o[e+1]]^T @ x[o[e]:o[e+1]]
// The offsets are device data, clamped into [0, rows] and made non-decreasing (expert_range).
// SIMT tiles of TILE x TILE outputs through shared memory. Forward: a block owns TILE rows and
// TILE columns and runs every expert whose rows meet its tile (usually one or two), each
// thread keeping the result of its own row's expert. d_w: a block owns a TILE x TILE tile of
// one expert's gradient and walks that expert's rows in order.
#include "dtype.cuh"
#include "op_params.cuh"

#define TILE 16

__device__ __forceinline__ long long clamp_rows(int o, long long rows)
{
	return o < 0 ? 0 : o > rows ? rows : o;
}

// expert e's rows [*lo, *hi): the running maximum of the clamped offsets
__device__ __forceinline__ void expert_range(const int *offsets, long long e, long long rows, long long *lo,
					     long long *hi)
{
	long long b = 0;
	for (long long i = 0; i <= e; i++)
		b = max(b, clamp_rows(offsets[i], rows));
	*lo = b;
	*hi = max(b, clamp_rows(offsets[e + 1], rows));
}

template <class D>
__device__ void grouped_matmul(long long rows, long long experts, long long n_out, long long k_in, int trans_w,
			       const typename D::T *x, const typename D::T *w, const int *offsets, typename D::T *out)
{
	__shared__ float xs[TILE][TILE + 1], ws[TILE][TILE + 1]; // xs[row][k], ws[k][col]
	const int tx = threadIdx.x, ty = threadIdx.y;
	const long long r_base = (long long)blockIdx.y * TILE, c_base = (long long)blockIdx.x * TILE;
	const long long r = r_base + ty, col = c_base + tx;
	long long lo = 0;
	for (long long e = 0; e < experts && lo < r_base + TILE; e++) {
		lo = max(lo, clamp_rows(offsets[e], rows));
		const long long hi = max(lo, clamp_rows(offsets[e + 1], rows));
		if (hi <= r_base || lo == hi) // the tile's rows are not this expert's (uniform per block)
			continue;
		const typename D::T *we = w + e * n_out * k_in;
		float acc = 0.0f;
		for (long long k0 = 0; k0 < k_in; k0 += TILE) {
			xs[ty][tx] = r < hi && k0 + tx < k_in ? D::load(x[r * k_in + k0 + tx]) : 0.0f;
			if (trans_w) // W[e] is [n_out, k_in]: read along k
				ws[tx][ty] = c_base + ty < n_out && k0 + tx < k_in ? D::load(we[(c_base + ty) * k_in + k0 + tx]) : 0.0f;
			else // W[e] is [k_in, n_out]
				ws[ty][tx] = k0 + ty < k_in && col < n_out ? D::load(we[(k0 + ty) * n_out + col]) : 0.0f;
			__syncthreads();
			for (int kk = 0; kk < TILE; kk++)
				acc += xs[ty][kk] * ws[kk][tx];
			__syncthreads();
		}
		if (r >= lo && r < hi && col < n_out)
			out[r * n_out + col] = D::store(acc);
		lo = hi;
	}
}

template <class D, class G>
__device__ void grouped_matmul_bwd_w(long long rows, long long n_out, long long k_in, const typename D::T *dy,
				     const typename D::T *x, const int *offsets, typename G::T *d_w)
{
	__shared__ float dys[TILE][TILE + 1], xs[TILE][TILE + 1]; // [row][n], [row][k]
	const int tx = threadIdx.x, ty = threadIdx.y;
	const long long e = blockIdx.z, n_base = (long long)blockIdx.y * TILE, k = (long long)blockIdx.x * TILE + tx;
	const long long n = n_base + ty;
	long long lo, hi;
	expert_range(offsets, e, rows, &lo, &hi);
	if (lo == hi)
		return; // keeps its gradient
	float acc = 0.0f;
	for (long long r0 = lo; r0 < hi; r0 += TILE) {
		const long long r = r0 + ty;
		dys[ty][tx] = r < hi && n_base + tx < n_out ? D::load(dy[r * n_out + n_base + tx]) : 0.0f;
		xs[ty][tx] = r < hi && k < k_in ? D::load(x[r * k_in + k]) : 0.0f;
		__syncthreads();
		for (int rr = 0; rr < TILE; rr++)
			acc += dys[rr][ty] * xs[rr][tx];
		__syncthreads();
	}
	if (n < n_out && k < k_in) {
		typename G::T *g = d_w + (e * n_out + n) * k_in + k;
		*g = G::store(G::load(*g) + acc);
	}
}

#define GROUPED_MATMUL(DT, TAG)                                                                               \
	extern "C" __global__ void dataflow_cuda_moe_grouped_matmul_##DT(DATAFLOW_MOE_GROUPED_MATMUL_PARAMS(DT##_t)) \
	{                                                                                                     \
		grouped_matmul<TAG>(rows, experts, n_out, k_in, trans_w, x, w, expert_offsets, out);          \
	}
GROUPED_MATMUL(fp32, Fp32)
GROUPED_MATMUL(bf16, Bf16)

#define GROUPED_MATMUL_BWD_W(DT, TAG, GT, GTAG)                                                               \
	extern "C" __global__ void dataflow_cuda_moe_grouped_matmul_bwd_w_##DT##_##GT(                        \
		DATAFLOW_MOE_GROUPED_MATMUL_BWD_W_PARAMS(DT##_t, GT##_t))                                     \
	{                                                                                                     \
		(void)experts;                                                                                \
		grouped_matmul_bwd_w<TAG, GTAG>(rows, n_out, k_in, dy, x, expert_offsets, d_w);               \
	}
GROUPED_MATMUL_BWD_W(fp32, Fp32, fp32, Fp32)
GROUPED_MATMUL_BWD_W(bf16, Bf16, fp32, Fp32)
GROUPED_MATMUL_BWD_W(bf16, Bf16, bf16, Bf16)
