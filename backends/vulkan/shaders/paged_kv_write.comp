#version 460
// paged_kv_write: k_pages[slot_mapping[t]][h][c] = k[t][h][c] (v likewise), one invocation per
// element of k (copied as stored); a slot outside the pool is skipped.
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args { DATAFLOW_PAGED_KV_WRITE_PARAMS(REF(DT_dtype)) } p;

void main()
{
	uint row = uint(p.num_kv_heads * p.head_dim);
	FOR_EACH_INDEX(i, p.num_tokens * p.num_kv_heads * p.head_dim) {
		int64_t slot = int64_t(p.slot_mapping.v[i / row]);
		if (slot >= 0 && slot < p.num_pages * p.page_size) {
			uint at = uint(slot) * row + i % row;
			p.k_pages.v[at] = p.k.v[i];
			p.v_pages.v[at] = p.v.v[i];
		}
	}
}
