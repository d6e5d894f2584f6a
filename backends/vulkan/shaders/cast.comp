#version 460
// cast: dst = convert(src) over n elements: widen to fp32 (exact), round once (RNE) to the
// destination format.
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args { DATAFLOW_CAST_PARAMS(REF(DT_src_dtype), REF(DT_dst_dtype)) } p;

void main()
{
	FOR_EACH_INDEX(i, p.n)
		p.dst.v[i] = STORE(DT_dst_dtype, LOAD(DT_src_dtype, p.src.v[i]));
}
