// paged_kv_write: k_pages[slot_mapping[t]][h][c] = k[t][h][c] (v likewise), one thread per
// element of k; a slot outside the pool [0, num_pages * page_size) is skipped.
#include "dtype.cuh"
#include "op_params.cuh"

template <class D> __device__ void paged_kv_write(DATAFLOW_PAGED_KV_WRITE_PARAMS(typename D::T))
{
	const long long row = num_kv_heads * head_dim, slots = num_pages * page_size;
	FOR_EACH_INDEX(i, num_tokens * row)
	{
		const long long slot = slot_mapping[i / row];
		if (slot < 0 || slot >= slots)
			continue;
		k_pages[slot * row + i % row] = k[i];
		v_pages[slot * row + i % row] = v[i];
	}
}

#define PAGED_KV_WRITE(DT, TAG)                                                                           \
	extern "C" __global__ void dataflow_cuda_paged_kv_write_##DT(DATAFLOW_PAGED_KV_WRITE_PARAMS(DT##_t)) \
	{                                                                                                 \
		paged_kv_write<TAG>(k, v, slot_mapping, k_pages, v_pages, num_tokens, num_pages, page_size,  \
				    num_kv_heads, head_dim);                                                 \
	}

PAGED_KV_WRITE(fp32, Fp32)
PAGED_KV_WRITE(fp16, Fp16)
PAGED_KV_WRITE(bf16, Bf16)
