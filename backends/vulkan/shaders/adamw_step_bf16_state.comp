#version 460
// adamw_step_bf16_state: AdamW with bf16 m and v (the update: adamw.glsl), written back with
// stochastic rounding by the counter-based words of the catalogue's doc (lowbias32 over the
// uint32 halves of seed, step and the element index; the index fits 32 bits here).
#include "common.glsl"
#include "adamw.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Args {
	int64_t n;
	REF(DT_param_dtype) param;
	REF(DT_grad_dtype) grad;
	bf16_ref m;
	bf16_ref v;
	fp32_ref master;
	fp32_ref scale;
	int64_t step;
	uint64_t seed;
	ADAMW_CONSTANTS;
} p;

uint mix32(uint x)
{
	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	x ^= x >> 16;
	return x;
}

// x rounded to bf16 by the random word r (NaN: to nearest even)
uint16_t sr_bf16(float x, uint r)
{
	if (isnan(x))
		return store_bf16(x);
	return uint16_t((floatBitsToUint(x) + (r & 0xffffu)) >> 16);
}

void main()
{
	bool has_master = uint64_t(p.master) != 0ul;
	float scale = uint64_t(p.scale) != 0ul ? p.scale.v[0] : 1.0;
	uint64_t s = uint64_t(p.step);
	uint key = mix32(uint(p.seed) ^ mix32(uint(p.seed >> 32) ^ mix32(uint(s) ^ mix32(uint(s >> 32)))));
	uint key_m = mix32(key ^ 1u), key_v = mix32(key ^ 2u);
	FOR_EACH_INDEX(i, p.n) {
		precise float x = has_master ? p.master.v[i] : LOAD(DT_param_dtype, p.param.v[i]);
		precise float m = load_bf16(p.m.v[i]), v = load_bf16(p.v.v[i]);
		ADAMW_UPDATE(p, LOAD(DT_grad_dtype, p.grad.v[i]), scale, x, m, v);
		p.m.v[i] = sr_bf16(m, mix32(mix32(i ^ key_m)));
		p.v.v[i] = sr_bf16(v, mix32(mix32(i ^ key_v)));
		if (has_master)
			p.master.v[i] = x;
		p.param.v[i] = STORE(DT_param_dtype, x);
	}
}
