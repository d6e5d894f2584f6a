#version 460
// grad_norm_sq_reduce: out[0] = (accumulate ? out[0] : 0) + the partials summed in block
// order, in fp64, rounded once to out's dtype (the host's bits). One invocation.
#include "common.glsl"
#include "op_params.glsl"
#include "fp64.glsl"
layout(local_size_x = 1) in;
layout(push_constant) uniform Args { DATAFLOW_GRAD_NORM_SQ_REDUCE_PARAMS(REF(DT_out_dtype)) } p;

void main()
{
	precise double total = 0.0;
	for (uint b = 0; b < uint(p.num_blocks); b++)
		total += uint64BitsToDouble(p.workspace.v[b]);
	if (p.accumulate != 0)
		total = LOAD_DOUBLE(DT_out_dtype, p.out_) + total;
	STORE_DOUBLE(DT_out_dtype, p.out_, total);
}
