#version 460
// set_mem: x[i] = value rounded (RNE) to x's dtype, for i < n.
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args { DATAFLOW_SET_MEM_PARAMS(REF(DT_dtype)) } p;

void main()
{
	FOR_EACH_INDEX(i, p.n)
		p.x.v[i] = STORE(DT_dtype, p.value);
}
