#version 460
// clip_by_global_norm: as the host kernel (torch.nn.utils.clip_grad_norm_ in fp32),
//   norm = sqrt(sumsq) (in double, rounded to fp32); scale = min(1, (1 / (norm + 1e-6)) * max_norm)
// NaN stays NaN. One invocation.
#include "common.glsl"
#include "op_params.glsl"
#include "fp64.glsl"
layout(local_size_x = 1) in;
layout(push_constant) uniform Args { DATAFLOW_CLIP_BY_GLOBAL_NORM_PARAMS(REF(DT_sumsq_dtype)) } p;

void main()
{
	precise float norm = float(sqrt(LOAD_DOUBLE(DT_sumsq_dtype, p.sumsq)));
	precise float s = (1.0 / (norm + 1e-6)) * float(p.max_norm);
	p.scale.v[0] = s > 1.0 ? 1.0 : s;
	if (uint64_t(p.norm) != 0ul)
		p.norm.v[0] = norm;
}
