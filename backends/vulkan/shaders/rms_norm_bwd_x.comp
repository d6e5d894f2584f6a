#version 460
// rms_norm_bwd_x: per row, in fp32 with g = dy * w, c = rstd^2 * (sum(g * x) / hidden),
// dx = rstd * (g - x * c), rounded once. Row sums as row_sum.glsl. dx may alias dy or x (each
// element is read before it is written, the row sum before the barrier).
#include "common.glsl"
#include "op_params.glsl"
#include "row_sum.glsl"
layout(push_constant) uniform Args { DATAFLOW_RMS_NORM_BWD_X_PARAMS(REF(DT_dtype)) } p;

float g_at(uint o, uint j)
{
	precise float g = LOAD(DT_dtype, p.dy.v[o + j]) * LOAD(DT_dtype, p.w.v[j]);
	return g;
}

void main()
{
	for (uint base = gl_WorkGroupID.x * ROWS; base < uint(p.rows); base += gl_NumWorkGroups.x * ROWS) {
		uint r = base + gl_LocalInvocationID.y;
		bool valid = r < uint(p.rows);
		uint o = r * uint(p.hidden);
		ROW_SUM(valid, p.hidden, g_at(o, j) * LOAD(DT_dtype, p.x.v[o + j]))
		if (valid) {
			float rstd = p.rstd.v[r];
			precise float c = (rstd * rstd) * (row_total[gl_LocalInvocationID.y] / float(p.hidden));
			for (uint j = gl_LocalInvocationID.x; j < uint(p.hidden); j += 16) {
				precise float dx = rstd * (g_at(o, j) - LOAD(DT_dtype, p.x.v[o + j]) * c);
				p.dx.v[o + j] = STORE(DT_dtype, dx);
			}
		}
	}
}
