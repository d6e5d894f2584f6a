#version 460
// adamw_step: AdamW with fp32 m and v (the update: adamw.glsl). master (fp32, may be 0) holds p
// when given; scale (may be 0) is a device fp32 [1].
#include "common.glsl"
#include "adamw.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args {
	int64_t n;
	REF(DT_param_dtype) param;
	REF(DT_grad_dtype) grad;
	fp32_ref m;
	fp32_ref v;
	fp32_ref master;
	fp32_ref scale;
	ADAMW_CONSTANTS;
} p;

void main()
{
	bool has_master = uint64_t(p.master) != 0ul;
	float scale = uint64_t(p.scale) != 0ul ? p.scale.v[0] : 1.0;
	FOR_EACH_INDEX(i, p.n) {
		precise float x = has_master ? p.master.v[i] : LOAD(DT_param_dtype, p.param.v[i]);
		precise float m = p.m.v[i], v = p.v.v[i];
		ADAMW_UPDATE(p, LOAD(DT_grad_dtype, p.grad.v[i]), scale, x, m, v);
		p.m.v[i] = m;
		p.v.v[i] = v;
		if (has_master)
			p.master.v[i] = x;
		p.param.v[i] = STORE(DT_param_dtype, x);
	}
}
