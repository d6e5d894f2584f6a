#version 460
// qmatmul_int4: 4-bit codes packed two per byte along k (k even: low nibble), rows cdiv(K, 2)
// bytes; a scale and a zero point (8 when zeros is NULL) per group of group_size along k
// (qmatmul.glsl has the math).
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args {
	DATAFLOW_QMATMUL_INT4_PARAMS(REF(DT_x_dtype), REF(DT_scale_dtype), REF(DT_out_dtype))
} p;

uint group_at(uint n, uint k)
{
	uint gs = uint(p.group_size), groups = (uint(p.K) + gs - 1) / gs;
	return n * groups + k / gs;
}
float code_at(uint n, uint k) { return float((uint(p.W.v[n * ((uint(p.K) + 1) / 2) + k / 2]) >> ((k & 1) * 4)) & 15u); }
float zero_at(uint n, uint k) { return uint64_t(p.zeros) != 0ul ? float(uint(p.zeros.v[group_at(n, k)])) : 8.0; }
float scale_at(uint n, uint k) { return LOAD(DT_scale_dtype, p.scales.v[group_at(n, k)]); }

#include "qmatmul.glsl"
