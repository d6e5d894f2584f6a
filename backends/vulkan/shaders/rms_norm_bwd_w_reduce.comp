#version 460
// rms_norm_bwd_w_reduce: dw[j] = fp32 sum over blocks b, in order, of workspace[b, j], rounded
// once to dw's dtype; one invocation per column.
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args { DATAFLOW_RMS_NORM_BWD_W_REDUCE_PARAMS(REF(DT_dw_dtype)) } p;

void main()
{
	uint h = uint(p.hidden);
	uint blocks = (uint(p.rows) + DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS - 1) / DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS;
	FOR_EACH_INDEX(c, h) {
		precise float s = 0.0;
		for (uint b = 0; b < blocks; b++)
			s += p.workspace.v[b * h + c];
		p.dw.v[c] = STORE(DT_dw_dtype, s);
	}
}
