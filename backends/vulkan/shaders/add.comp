#version 460
// add: out = alpha * a + beta * b over n elements, fp32 arithmetic (two products, one sum;
// `precise` forbids fusing them into an fma), one rounding to the dtype. out may alias a or b.
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args { DATAFLOW_ADD_PARAMS(REF(DT_dtype)) } p;

void main()
{
	FOR_EACH_INDEX(i, p.n) {
		precise float r = p.alpha * LOAD(DT_dtype, p.a.v[i]) + p.beta * LOAD(DT_dtype, p.b.v[i]);
		p.out_.v[i] = STORE(DT_dtype, r);
	}
}
