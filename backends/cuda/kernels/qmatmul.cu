// Weight-only int8 / int4 dequantize-matmul, as the host kernel (backends/host/kernels/qmatmul.c):
//   out[m, n] = sum_k x[m, k] * w[n, k] (+ C[m, n]),  w = fp32(code - zero) * scale
// One half-warp (16 lanes) per output channel n and block of up to ROWS rows of x: lane l
// takes k = l, l + 16, ... in order with fmaf, so its sums are the host's 16 accumulator
// lanes; a shuffle tree (offsets 8, 4, 2, 1) adds them in the host's pairwise order, then C is
// added and out rounded once: the same bits as the host, whatever M. Each weight is read and
// dequantized once per row block. Threads run in whole warps (the loop bound is a multiple of
// 32), so every lane reaches every shuffle; lanes past the work only skip the stores.
#include "dtype.cuh"
#include "op_params.cuh"

#define ROWS 4

template <int BITS> __device__ __forceinline__ float code_at(const unsigned char *row, long long k)
{
	if (BITS == 8)
		return (float)(signed char)row[k];
	return (float)((row[k >> 1] >> ((k & 1) * 4)) & 15);
}

template <int BITS, class X, class S, class O>
__device__ void qmatmul(long long M, long long N, long long K, long long group, long long groups,
			long long row_bytes, const typename X::T *x, const unsigned char *W, const typename S::T *scales,
			const unsigned char *zeros, const typename O::T *C, typename O::T *out)
{
	const long long blocks = (M + ROWS - 1) / ROWS, items = N * blocks;
	const long long threads = (items * 16 + 31) / 32 * 32;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < threads;
	     i += (long long)gridDim.x * blockDim.x) {
		const long long item = i >> 4;
		const int lane = (int)(i & 15);
		const bool valid = item < items;
		const long long n = valid ? item / blocks : 0, m0 = valid ? item % blocks * ROWS : 0;
		const int rows = valid ? (int)min((long long)ROWS, M - m0) : 0;
		const unsigned char *row = W + n * row_bytes;
		float acc[ROWS] = {0.0f, 0.0f, 0.0f, 0.0f};
		for (long long k = lane; k < K && rows > 0; k += 16) {
			const long long g = k / group;
			const float z = BITS == 8 ? 0.0f : (zeros ? (float)zeros[n * groups + g] : 8.0f);
			const float w = (code_at<BITS>(row, k) - z) * S::load(scales[n * groups + g]);
			for (int r = 0; r < ROWS; r++)
				if (r < rows)
					acc[r] = fmaf(X::load(x[(m0 + r) * K + k]), w, acc[r]);
		}
		for (int r = 0; r < ROWS; r++) {
			float v = acc[r];
			for (int o = 8; o > 0; o >>= 1)
				v += __shfl_down_sync(0xffffffffu, v, o, 16);
			if (lane == 0 && r < rows) {
				const long long at = (m0 + r) * N + n;
				if (C)
					v += O::load(C[at]);
				out[at] = O::store(v);
			}
		}
	}
}

#define QMATMUL_INT8(XN, SN, ON, X, S, O)                                                                \
	extern "C" __global__ void dataflow_cuda_qmatmul_int8_##XN##_##SN##_##ON(                         \
		DATAFLOW_QMATMUL_INT8_PARAMS(XN##_t, SN##_t, ON##_t))                                     \
	{                                                                                                 \
		qmatmul<8, X, S, O>(M, N, K, K, 1, K, x, (const unsigned char *)W, scales, 0, C, out);    \
	}
#define QMATMUL_INT4(XN, SN, ON, X, S, O)                                                                \
	extern "C" __global__ void dataflow_cuda_qmatmul_int4_##XN##_##SN##_##ON(                         \
		DATAFLOW_QMATMUL_INT4_PARAMS(XN##_t, SN##_t, ON##_t))                                     \
	{                                                                                                 \
		qmatmul<4, X, S, O>(M, N, K, group_size, (K + group_size - 1) / group_size, (K + 1) / 2, x, W, \
				    scales, zeros, C, out);                                               \
	}
#define QMATMUL_ALL(XN, SN, ON, X, S, O) QMATMUL_INT8(XN, SN, ON, X, S, O) QMATMUL_INT4(XN, SN, ON, X, S, O)

QMATMUL_ALL(fp32, fp32, fp32, Fp32, Fp32, Fp32)
QMATMUL_ALL(fp32, fp32, bf16, Fp32, Fp32, Bf16)
QMATMUL_ALL(fp32, bf16, fp32, Fp32, Bf16, Fp32)
QMATMUL_ALL(fp32, bf16, bf16, Fp32, Bf16, Bf16)
QMATMUL_ALL(bf16, fp32, fp32, Bf16, Fp32, Fp32)
QMATMUL_ALL(bf16, fp32, bf16, Bf16, Fp32, Bf16)
QMATMUL_ALL(bf16, bf16, fp32, Bf16, Bf16, Fp32)
QMATMUL_ALL(bf16, bf16, bf16, Bf16, Bf16, Bf16)
