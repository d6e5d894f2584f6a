#version 460
// rms_norm: per row, in fp32, rstd = 1 / sqrt(sum(x^2) / hidden + eps), y = w * to_dtype(x * rstd)
// (y rounded again). Row sums as row_sum.glsl. y may alias x: every lane has read the row
// (for the sum) before the barrier, and each element is read before it is written.
#include "common.glsl"
#include "op_params.glsl"
#include "row_sum.glsl"
layout(push_constant) uniform Args { DATAFLOW_RMS_NORM_PARAMS(REF(DT_dtype)) } p;

void main()
{
	for (uint base = gl_WorkGroupID.x * ROWS; base < uint(p.rows); base += gl_NumWorkGroups.x * ROWS) {
		uint r = base + gl_LocalInvocationID.y;
		bool valid = r < uint(p.rows);
		uint o = r * uint(p.hidden);
		ROW_SUM(valid, p.hidden, LOAD(DT_dtype, p.x.v[o + j]) * LOAD(DT_dtype, p.x.v[o + j]))
		if (valid) {
			precise float rstd = 1.0 / sqrt(row_total[gl_LocalInvocationID.y] / float(p.hidden) + p.eps);
			if (gl_LocalInvocationID.x == 0)
				p.rstd.v[r] = rstd;
			for (uint j = gl_LocalInvocationID.x; j < uint(p.hidden); j += 16) {
				precise float q = ROUND(DT_dtype, LOAD(DT_dtype, p.x.v[o + j]) * rstd);
				precise float y = LOAD(DT_dtype, p.w.v[j]) * q;
				p.y.v[o + j] = STORE(DT_dtype, y);
			}
		}
	}
}
