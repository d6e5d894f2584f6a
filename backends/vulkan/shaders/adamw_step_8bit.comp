#version 460
// adamw_step_8bit: AdamW with blockwise 8-bit m and v (the update: adamw.glsl). One workgroup
// of DATAFLOW_ADAMW_8BIT_BLOCK invocations per quantization block (looping over blocks): the
// codes dequantized, updated in fp32, the block's absmax by a shared-memory max tree (exact,
// so any order gives it), then the nearest code by a binary search over the scaled midpoints.
#include "common.glsl"
#include "adamw.glsl"
layout(local_size_x = 256) in; // DATAFLOW_ADAMW_8BIT_BLOCK (vulkan_default_ops.c checks)
layout(push_constant) uniform Args {
	int64_t n;
	REF(DT_param_dtype) param;
	REF(DT_grad_dtype) grad;
	uint8_ref m;
	uint8_ref v;
	fp32_ref m_absmax;
	fp32_ref v_absmax;
	fp32_ref qmap_m;
	fp32_ref qmap_v;
	fp32_ref master;
	fp32_ref scale;
	ADAMW_CONSTANTS;
} p;

shared float peak[256];

float block_max(float x)
{
	uint t = gl_LocalInvocationID.x;
	barrier(); // the previous call's readers are done with peak
	peak[t] = x;
	barrier();
	for (uint s = 128u; s > 0u; s >>= 1) {
		if (t < s)
			peak[t] = max(peak[t], peak[t + s]);
		barrier();
	}
	return peak[0];
}

uint nearest_code(fp32_ref q, float absmax, float x)
{
	uint lo = 0u, hi = 255u;
	while (lo < hi) {
		uint mid = (lo + hi) >> 1;
		precise float t = ((q.v[mid] + q.v[mid + 1u]) * 0.5) * absmax;
		if (x > t)
			lo = mid + 1u;
		else
			hi = mid;
	}
	return lo;
}

void main()
{
	bool has_master = uint64_t(p.master) != 0ul;
	float scale = uint64_t(p.scale) != 0ul ? p.scale.v[0] : 1.0;
	uint n = uint(p.n), blocks = (n + 255u) / 256u;
	for (uint k = gl_WorkGroupID.x; k < blocks; k += gl_NumWorkGroups.x) {
		uint i = k * 256u + gl_LocalInvocationID.x;
		bool live = i < n;
		precise float m = 0.0, v = 0.0;
		if (live) {
			m = p.qmap_m.v[uint(p.m.v[i])] * p.m_absmax.v[k];
			v = p.qmap_v.v[uint(p.v.v[i])] * p.v_absmax.v[k];
			precise float x = has_master ? p.master.v[i] : LOAD(DT_param_dtype, p.param.v[i]);
			ADAMW_UPDATE(p, LOAD(DT_grad_dtype, p.grad.v[i]), scale, x, m, v);
			if (has_master)
				p.master.v[i] = x;
			p.param.v[i] = STORE(DT_param_dtype, x);
		}
		float ma = block_max(live ? abs(m) : 0.0);
		float va = block_max(live ? abs(v) : 0.0);
		if (live) {
			p.m.v[i] = uint8_t(nearest_code(p.qmap_m, ma, m));
			p.v.v[i] = uint8_t(nearest_code(p.qmap_v, va, v));
		}
		barrier(); // every invocation has read this block's absmax before it is overwritten
		if (gl_LocalInvocationID.x == 0u) {
			p.m_absmax.v[k] = ma;
			p.v_absmax.v[k] = va;
		}
	}
}
