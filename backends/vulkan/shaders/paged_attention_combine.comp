#version 460
// paged_attention_combine: one workgroup per (query head, query token) of a sequence, lanes
// over the head dimensions: M = max_s m_s, L = sum_s 2^(m_s - M) l_s (splits in order),
// out = sum_s 2^(m_s - M) o_s / L, lse = (M + log2 L) ln 2; NaN when a split is.
#include "common.glsl"
#include "op_params.glsl"
#include "attention.glsl"
layout(push_constant) uniform Args { DATAFLOW_PAGED_ATTENTION_COMBINE_PARAMS(REF(DT_dtype)) } p;

void main()
{
	uint lane = gl_LocalInvocationID.x, hq = uint(p.num_q_heads), d = uint(p.head_dim), tq = uint(p.total_q);
	uint batch = uint(p.batch), splits = uint(p.num_splits), rows = tq * hq;
	for (uint item = gl_WorkGroupID.x; item < tq * hq; item += gl_NumWorkGroups.x) {
		uint h = item / tq, t = item % tq, seq, lo, hi, lo2, hi2;
		ATTN_SEQ_OF(t, p.cu_seqlens_q, tq, p.cu_seqlens_q, tq, batch, seq, lo, hi, lo2, hi2)
		if (seq >= batch)
			continue;
		uint row = t * hq + h;
		float M = NEG_INF;
		bool bad = false;
		for (uint s = 0; s < splits; s++) {
			float m = p.partial_ml.v[2 * (s * rows + row)], l = p.partial_ml.v[2 * (s * rows + row) + 1];
			bad = bad || isnan(l);
			M = l > 0.0 && m > M ? m : M;
		}
		float acc[ATTN_DIMS];
		for (int c = 0; c < ATTN_DIMS; c++)
			acc[c] = 0.0;
		precise float L = 0.0;
		for (uint s = 0; s < splits && M > NEG_INF; s++) {
			float m = p.partial_ml.v[2 * (s * rows + row)], l = p.partial_ml.v[2 * (s * rows + row) + 1];
			if (!(l > 0.0))
				continue;
			float w = exp2(m - M);
			for (uint c = 0, k = lane; k < d; c++, k += ATTN_BLOCK)
				acc[c] = fma(w, p.partial_o.v[(s * rows + row) * d + k], acc[c]);
			L = fma(w, l, L);
		}
		float nan_ = uintBitsToFloat(0x7fc00000u);
		float inv = bad ? nan_ : L > 0.0 ? 1.0 / L : 0.0;
		for (uint c = 0, k = lane; k < d; c++, k += ATTN_BLOCK) {
			precise float y = acc[c] * inv;
			p.out_.v[row * d + k] = STORE(DT_dtype, y);
		}
		if (lane == 0 && uint64_t(p.lse) != 0ul)
			p.lse.v[h * tq + t] = bad ? nan_ : L > 0.0 ? (M + log2(L)) * float(ATTN_LN2) : NEG_INF;
	}
}
