#version 460
// scale: out = alpha * x over n elements, one fp32 product rounded once to the dtype.
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args { DATAFLOW_SCALE_PARAMS(REF(DT_dtype)) } p;

void main()
{
	FOR_EACH_INDEX(i, p.n) {
		precise float r = p.alpha * LOAD(DT_dtype, p.x.v[i]);
		p.out_.v[i] = STORE(DT_dtype, r);
	}
}
