#version 460
// rms_norm_bwd_w_partials: workspace[b, j] = fp32 sum over the rows r of block b (of
// DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS rows), in order, of dy[r, j] * (x[r, j] * rstd[r]);
// one invocation per (block, column).
#include "common.glsl"
#include "op_params.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args { DATAFLOW_RMS_NORM_BWD_W_PARTIALS_PARAMS(REF(DT_dtype)) } p;

void main()
{
	uint h = uint(p.hidden), rows = uint(p.rows);
	uint blocks = (rows + DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS - 1) / DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS;
	FOR_EACH_INDEX(i, blocks * h) {
		uint b = i / h, c = i % h, r0 = b * DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS;
		uint r1 = min(r0 + DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS, rows);
		precise float s = 0.0;
		for (uint r = r0; r < r1; r++)
			s += LOAD(DT_dtype, p.dy.v[r * h + c]) * (LOAD(DT_dtype, p.x.v[r * h + c]) * p.rstd.v[r]);
		p.workspace.v[i] = s;
	}
}
