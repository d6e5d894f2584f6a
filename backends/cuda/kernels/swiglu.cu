// swiglu forward and backward, elementwise in fp32, as the host kernel (e = exp(-|g|), which
// cannot overflow; s = sigmoid(g) = (g < 0 ? e : 1) / (1 + e)):
//   forward:  silu = (g < 0 ? g * e : g) / (1 + e),  out = to_dtype(to_dtype(silu) * up)
//   backward: d_up = d_out * silu,  d_gate = ((d_out * up) * s) * (1 + g * (1 - s))
// Each element's inputs are read before its outputs are written (by the same thread), so
// outputs may alias inputs. 16-byte vectors when every pointer is aligned, else elements.
#include "dtype.cuh"
#include "op_params.cuh"

struct Silu {
	float silu, s;
};

__device__ __forceinline__ Silu silu_of(float g)
{
	float e = expf(-fabsf(g)), d = 1.0f + e;
	return {(g < 0.0f ? g * e : g) / d, (g < 0.0f ? e : 1.0f) / d};
}

template <class D> __device__ __forceinline__ float swiglu1(float g, float u)
{
	return D::round(silu_of(g).silu) * u;
}

template <class D>
__device__ void swiglu(long long n, const typename D::T *gate, const typename D::T *up, typename D::T *out)
{
	typedef Vec<D> V;
	if (vec_ok<D>(n, gate, up, out)) {
		FOR_EACH_INDEX(i, n / V::N)
		{
			V g, u, o;
			g.load(gate + i * V::N);
			u.load(up + i * V::N);
			for (int k = 0; k < V::N; k++)
				o.set(k, swiglu1<D>(g.get(k), u.get(k)));
			o.store(out + i * V::N);
		}
	} else {
		FOR_EACH_INDEX(i, n)
		out[i] = D::store(swiglu1<D>(D::load(gate[i]), D::load(up[i])));
	}
}

template <class D>
__device__ void swiglu_bwd(long long n, const typename D::T *d_out, const typename D::T *gate, const typename D::T *up,
			   typename D::T *d_gate, typename D::T *d_up)
{
	typedef Vec<D> V;
	if (vec_ok<D>(n, d_out, gate, up, d_gate) && vec_ok<D>(n, d_up)) {
		FOR_EACH_INDEX(i, n / V::N)
		{
			V dy, g, u, dg, du;
			dy.load(d_out + i * V::N);
			g.load(gate + i * V::N);
			u.load(up + i * V::N);
			for (int k = 0; k < V::N; k++) {
				float gk = g.get(k);
				Silu a = silu_of(gk);
				dg.set(k, ((dy.get(k) * u.get(k)) * a.s) * (1.0f + gk * (1.0f - a.s)));
				du.set(k, dy.get(k) * a.silu);
			}
			dg.store(d_gate + i * V::N);
			du.store(d_up + i * V::N);
		}
	} else {
		FOR_EACH_INDEX(i, n)
		{
			float dy = D::load(d_out[i]), g = D::load(gate[i]), u = D::load(up[i]);
			Silu a = silu_of(g);
			d_gate[i] = D::store(((dy * u) * a.s) * (1.0f + g * (1.0f - a.s)));
			d_up[i] = D::store(dy * a.silu);
		}
	}
}

#define SWIGLU(DT, TAG)                                                                                  \
	extern "C" __global__ void dataflow_cuda_swiglu_##DT(DATAFLOW_SWIGLU_PARAMS(DT##_t))              \
	{                                                                                                \
		swiglu<TAG>(rows * ffn, gate, up, out);                                                    \
	}                                                                                                \
	extern "C" __global__ void dataflow_cuda_swiglu_bwd_##DT(DATAFLOW_SWIGLU_BWD_PARAMS(DT##_t))      \
	{                                                                                                \
		swiglu_bwd<TAG>(rows * ffn, d_out, gate, up, d_gate, d_up);                                \
	}

SWIGLU(fp32, Fp32)
SWIGLU(fp16, Fp16)
SWIGLU(bf16, Bf16)
