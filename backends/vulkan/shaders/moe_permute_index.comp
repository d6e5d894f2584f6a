#version 460
// moe_permute_index: slots ordered by expert, then token, then j (as the host). One workgroup:
// invocation e (striding over the experts) counts expert e's assignments into shared memory,
// invocation 0 forms the offsets, then e walks the ids in order handing out its slots; ids
// outside [0, experts) get slot -1 and the rows past the last expert row_map -1.
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args { DATAFLOW_MOE_PERMUTE_INDEX_PARAMS(REF(DT_id_dtype)) } p;

shared int offsets[DATAFLOW_MOE_MAX_EXPERTS + 1];

void main()
{
	uint E = uint(p.experts), n = uint(p.tokens * p.top_k), lane = gl_LocalInvocationID.x;
	for (uint e = lane; e < E; e += 256) {
		int count = 0;
		for (uint i = 0; i < n; i++)
			count += p.topk_ids.v[i] == int(e) ? 1 : 0;
		offsets[e + 1] = count;
	}
	barrier();
	if (lane == 0) {
		offsets[0] = 0;
		for (uint e = 0; e < E; e++)
			offsets[e + 1] += offsets[e];
	}
	barrier();
	for (uint e = lane; e <= E; e += 256)
		p.expert_offsets.v[e] = offsets[e];
	for (uint e = lane; e < E; e += 256) {
		int next = offsets[e];
		for (uint i = 0; i < n; i++)
			if (p.topk_ids.v[i] == int(e)) {
				p.slot_of.v[i] = next;
				p.row_map.v[uint(next)] = int(i / uint(p.top_k));
				next++;
			}
	}
	for (uint i = lane; i < n; i += 256) {
		int id = p.topk_ids.v[i];
		if (id < 0 || id >= int(E))
			p.slot_of.v[i] = -1;
		if (int(i) >= offsets[E])
			p.row_map.v[i] = -1;
	}
}
