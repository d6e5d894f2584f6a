// rms_norm forward and bwd_x, one block per row (grid-stride over rows), fp32 math:
//   forward: rstd = 1 / sqrt(sum(x^2) / hidden + eps),  y = w * to_dtype(x * rstd)
//   bwd_x:   g = dy * w,  c = rstd^2 * (sum(g * x) / hidden),  dx = rstd * (g - x * c)
// Each thread takes the elements (or 16-byte vectors, when every row pointer is aligned)
// j = threadIdx.x + k * blockDim.x in order; block_sum adds the threads' sums in a fixed tree,
// so the bits depend only on the block size, which the launch function picks from hidden.
// A row is read whole for its sum before the barrier in block_sum, and the second pass reads
// each element before the same thread writes it, so y may alias x and dx may alias dy or x.
#include "dtype.cuh"
#include "op_params.cuh"
#include "reduce.cuh"

#define FOR_EACH_ROW(r, rows) for (long long r = blockIdx.x; r < (rows); r += gridDim.x)

template <class D>
__device__ void rms_norm_rows(long long rows, long long hidden, float eps, const typename D::T *x,
			      const typename D::T *w, typename D::T *y, float *rstd_out)
{
	typedef Vec<D> V;
	const bool vec = vec_ok<D>(hidden, x, w, y);
	FOR_EACH_ROW(r, rows)
	{
		const typename D::T *xr = x + r * hidden;
		typename D::T *yr = y + r * hidden;
		float sum = 0.0f;
		if (vec) {
			for (long long j = threadIdx.x * V::N; j < hidden; j += blockDim.x * V::N) {
				V v;
				v.load(xr + j);
				for (int k = 0; k < V::N; k++)
					sum += v.get(k) * v.get(k);
			}
		} else {
			for (long long j = threadIdx.x; j < hidden; j += blockDim.x)
				sum += D::load(xr[j]) * D::load(xr[j]);
		}
		const float rstd = 1.0f / sqrtf(block_sum(sum) / (float)hidden + eps);
		if (threadIdx.x == 0)
			rstd_out[r] = rstd;
		if (vec) {
			for (long long j = threadIdx.x * V::N; j < hidden; j += blockDim.x * V::N) {
				V v, g, o;
				v.load(xr + j);
				g.load(w + j);
				for (int k = 0; k < V::N; k++)
					o.set(k, g.get(k) * D::round(v.get(k) * rstd));
				o.store(yr + j);
			}
		} else {
			for (long long j = threadIdx.x; j < hidden; j += blockDim.x)
				yr[j] = D::store(D::load(w[j]) * D::round(D::load(xr[j]) * rstd));
		}
	}
}

template <class D>
__device__ void rms_norm_bwd_x_rows(long long rows, long long hidden, const typename D::T *dy,
				    const typename D::T *x, const typename D::T *w, const float *rstd_in,
				    typename D::T *dx)
{
	typedef Vec<D> V;
	const bool vec = vec_ok<D>(hidden, dy, x, w, dx);
	FOR_EACH_ROW(r, rows)
	{
		const typename D::T *dyr = dy + r * hidden, *xr = x + r * hidden;
		typename D::T *dxr = dx + r * hidden;
		float sum = 0.0f;
		if (vec) {
			for (long long j = threadIdx.x * V::N; j < hidden; j += blockDim.x * V::N) {
				V a, b, c;
				a.load(dyr + j);
				b.load(w + j);
				c.load(xr + j);
				for (int k = 0; k < V::N; k++)
					sum += (a.get(k) * b.get(k)) * c.get(k);
			}
		} else {
			for (long long j = threadIdx.x; j < hidden; j += blockDim.x)
				sum += (D::load(dyr[j]) * D::load(w[j])) * D::load(xr[j]);
		}
		const float rstd = rstd_in[r];
		const float c = (rstd * rstd) * (block_sum(sum) / (float)hidden);
		if (vec) {
			for (long long j = threadIdx.x * V::N; j < hidden; j += blockDim.x * V::N) {
				V a, b, e, o;
				a.load(dyr + j);
				b.load(w + j);
				e.load(xr + j);
				for (int k = 0; k < V::N; k++)
					o.set(k, rstd * (a.get(k) * b.get(k) - e.get(k) * c));
				o.store(dxr + j);
			}
		} else {
			for (long long j = threadIdx.x; j < hidden; j += blockDim.x) {
				float g = D::load(dyr[j]) * D::load(w[j]);
				dxr[j] = D::store(rstd * (g - D::load(xr[j]) * c));
			}
		}
	}
}

#define RMS_NORM(DT, TAG)                                                                               \
	extern "C" __global__ void dataflow_cuda_rms_norm_##DT(DATAFLOW_RMS_NORM_PARAMS(DT##_t))         \
	{                                                                                               \
		rms_norm_rows<TAG>(rows, hidden, eps, x, w, y, rstd);                                   \
	}                                                                                               \
	extern "C" __global__ void dataflow_cuda_rms_norm_bwd_x_##DT(DATAFLOW_RMS_NORM_BWD_X_PARAMS(DT##_t)) \
	{                                                                                               \
		rms_norm_bwd_x_rows<TAG>(rows, hidden, dy, x, w, rstd, dx);                             \
	}

RMS_NORM(fp32, Fp32)
RMS_NORM(fp16, Fp16)
RMS_NORM(bf16, Bf16)
