// rope and rope_bwd (HF Llama rotate_half): with a = float(positions[t]) * inv_freq[i],
// c = cos(a), s = SIGN * sin(a) (rope_bwd's inverse rotation negates s), d = head_dim / 2,
//   OUT[i] = IN[i] * c - IN[i + d] * s,   OUT[i + d] = IN[i + d] * c + IN[i] * s
// in fp32, products and sums rounded separately (no fma), one rounding to the dtype. One
// invocation per pair (i, i + d) of every token and head, which reads both before writing
// either, so OUT may be IN.
#include "sincos.glsl"
layout(local_size_x = 256) in;

void main()
{
	uint d = uint(p.head_dim) / 2, heads = uint(p.num_heads);
	FOR_EACH_INDEX(e, p.num_tokens * p.num_heads * (p.head_dim / 2)) {
		uint t = e / (heads * d), i = e % d, base = (e / d) * 2 * d;
		vec2 sc = sin_cos(float(p.positions.v[t]) * p.inv_freq.v[i]);
		float c = sc.y, s = SIGN * sc.x;
		float x1 = LOAD(DT_dtype, p.IN.v[base + i]), x2 = LOAD(DT_dtype, p.IN.v[base + d + i]);
		precise float o1 = x1 * c - x2 * s, o2 = x2 * c + x1 * s;
		p.OUT.v[base + i] = STORE(DT_dtype, o1);
		p.OUT.v[base + d + i] = STORE(DT_dtype, o2);
	}
}
