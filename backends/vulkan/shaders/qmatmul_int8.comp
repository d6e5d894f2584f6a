#version 460
// qmatmul_int8: int8 codes [N, K], one scale per row, zero 0 (qmatmul.glsl has the math).
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args {
	DATAFLOW_QMATMUL_INT8_PARAMS(REF(DT_x_dtype), REF(DT_scale_dtype), REF(DT_out_dtype))
} p;

float code_at(uint n, uint k) { return float(INT8_OF(p.W.v[n * uint(p.K) + k])); }
float zero_at(uint n, uint k) { return 0.0; }
float scale_at(uint n, uint k) { return LOAD(DT_scale_dtype, p.scales.v[n]); }

#include "qmatmul.glsl"
