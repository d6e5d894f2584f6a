#version 460
// swiglu_bwd: in fp32 with e = exp(-|g|), s = (g < 0 ? e : 1) / (1 + e) (the sigmoid),
// silu = (g < 0 ? g * e : g) / (1 + e):
//   d_up = d_out * silu,   d_gate = ((d_out * up) * s) * (1 + g * (1 - s)),   each rounded once.
// The outputs may alias the inputs (each element's inputs are read before its outputs written).
#include "common.glsl"
#include "exp.glsl"
#include "op_params.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args { DATAFLOW_SWIGLU_BWD_PARAMS(REF(DT_dtype)) } p;

void main()
{
	FOR_EACH_INDEX(i, p.rows * p.ffn) {
		float dout = LOAD(DT_dtype, p.d_out.v[i]), g = LOAD(DT_dtype, p.gate.v[i]), u = LOAD(DT_dtype, p.up.v[i]);
		precise float e = exp_nonpos(-abs(g)), d = 1.0 + e;
		precise float s = (g < 0.0 ? e : 1.0) / d, silu = (g < 0.0 ? g * e : g) / d;
		precise float dg = ((dout * u) * s) * (1.0 + g * (1.0 - s)), du = dout * silu;
		p.d_gate.v[i] = STORE(DT_dtype, dg);
		p.d_up.v[i] = STORE(DT_dtype, du);
	}
}
