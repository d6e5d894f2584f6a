#version 460
// swiglu: in fp32 with e = exp(-|g|) (exp.glsl), silu = (g < 0 ? g * e : g) / (1 + e),
// out = to_dtype(to_dtype(silu) * up): silu rounded before the multiply, as F.silu(gate) * up.
// out may alias gate or up (each element is read before it is written).
#include "common.glsl"
#include "exp.glsl"
#include "op_params.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args { DATAFLOW_SWIGLU_PARAMS(REF(DT_dtype)) } p;

void main()
{
	FOR_EACH_INDEX(i, p.rows * p.ffn) {
		float g = LOAD(DT_dtype, p.gate.v[i]), e = exp_nonpos(-abs(g));
		precise float silu = (g < 0.0 ? g * e : g) / (1.0 + e);
		precise float out_ = ROUND(DT_dtype, silu) * LOAD(DT_dtype, p.up.v[i]);
		p.out_.v[i] = STORE(DT_dtype, out_);
	}
}
