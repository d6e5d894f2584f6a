#version 460
// embedding_bwd_w: d_table[ids[t], :] += d_out[t, :], ids outside [0, vocab) skipped. One
// invocation per column walks the tokens in order, so each element sums its tokens in token
// order in fp32 (the host's order: the same bits), with no atomics.
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args {
	DATAFLOW_EMBEDDING_BWD_W_PARAMS(REF(DT_id_dtype), REF(DT_dtype), REF(DT_grad_dtype))
} p;

void main()
{
	uint h = uint(p.hidden);
	FOR_EACH_INDEX(c, h) {
		for (uint t = 0; t < uint(p.num_tokens); t++) {
			int64_t id = int64_t(p.ids.v[t]);
			int64_t row = clamp(id, int64_t(0), p.vocab - 1);
			uint at = uint(row) * h + c; // in range (embedding.comp)
			precise float s = p.d_table.v[at] + LOAD(DT_dtype, p.d_out.v[t * h + c]);
			if (row == id)
				p.d_table.v[at] = s;
		}
	}
}
