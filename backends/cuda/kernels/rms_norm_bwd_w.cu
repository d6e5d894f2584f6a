// rms_norm_bwd_w in two ops over an fp32 workspace [blocks][hidden], the host's order exactly:
//   partials: workspace[b][j] = sum over the rows r of block b, in order, of dy[r][j] * (x[r][j] * rstd[r])
//   reduce:   dw[j] = sum over b, in order, of workspace[b][j], rounded once to dw's dtype
// (blocks of DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS rows). One thread per (block, column) and per
// column: each sum is one fixed sequence of fp32 adds from 0, as on the host, so dw has the
// host's bits.
#include "dtype.cuh"
#include "op_params.cuh"

#define BLOCK_ROWS DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS

// grid (column groups, row blocks)
template <class D>
__device__ void bwd_w_partials(long long rows, long long hidden, const typename D::T *dy, const typename D::T *x,
			       const float *rstd, float *workspace)
{
	const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
	if (j >= hidden)
		return;
	const long long r1 = (b + 1) * BLOCK_ROWS < rows ? (b + 1) * BLOCK_ROWS : rows;
	float s = 0.0f;
	for (long long r = b * BLOCK_ROWS; r < r1; r++)
		s += D::load(dy[r * hidden + j]) * (D::load(x[r * hidden + j]) * rstd[r]);
	workspace[b * hidden + j] = s;
}

template <class D> __device__ void bwd_w_reduce(long long rows, long long hidden, const float *workspace, typename D::T *dw)
{
	const long long blocks = (rows + BLOCK_ROWS - 1) / BLOCK_ROWS;
	FOR_EACH_INDEX(j, hidden)
	{
		float s = 0.0f;
		for (long long b = 0; b < blocks; b++)
			s += workspace[b * hidden + j];
		dw[j] = D::store(s);
	}
}

#define RMS_NORM_BWD_W(DT, TAG)                                                                          \
	extern "C" __global__ void dataflow_cuda_rms_norm_bwd_w_partials_##DT(                             \
		DATAFLOW_RMS_NORM_BWD_W_PARTIALS_PARAMS(DT##_t))                                           \
	{                                                                                                \
		bwd_w_partials<TAG>(rows, hidden, dy, x, rstd, workspace);                                 \
	}                                                                                                \
	extern "C" __global__ void dataflow_cuda_rms_norm_bwd_w_reduce_##DT(DATAFLOW_RMS_NORM_BWD_W_REDUCE_PARAMS(DT##_t)) \
	{                                                                                                \
		bwd_w_reduce<TAG>(rows, hidden, workspace, dw);                                            \
	}

RMS_NORM_BWD_W(fp32, Fp32)
RMS_NORM_BWD_W(fp16, Fp16)
RMS_NORM_BWD_W(bf16, Bf16)
