#version 460
// embedding: out[t, :] = table[ids[t], :], a zero row for an id outside [0, vocab); one
// invocation per element of out (elements are copied as stored).
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args { DATAFLOW_EMBEDDING_PARAMS(REF(DT_id_dtype), REF(DT_dtype)) } p;

void main()
{
	uint h = uint(p.hidden);
	FOR_EACH_INDEX(i, p.num_tokens * p.hidden) {
		int64_t id = int64_t(p.ids.v[i / h]);
		int64_t row = clamp(id, int64_t(0), p.vocab - 1);
		// an id outside [0, vocab) is not row: the load is from the clamped row, in range either
		// way (compilers may load before the test: lavapipe does, from a selected address too)
		uint at = uint(row) * h + i % h;
		p.out_.v[i] = row == id ? p.table.v[at] : STORE(DT_dtype, 0.0);
	}
}
