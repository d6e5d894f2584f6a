// What the attention kernels share, in the host kernels' order (backends/host/kernels/
// attention.h): keys in blocks of ATTN_BLOCK from the start of their sequence, scores in base
// 2 (scale * log2 e folded into q), every dot product an fma chain over the head dimension
// in order from 0, exp2 the host's polynomial. One workgroup of ATTN_BLOCK lanes owns one
// query (forward, dq) or one key (dk, dv) of one head and is the only writer of its rows, so
// no atomics: lane j computes the score of the block's key (query) j, then each lane
// accumulates the output dimensions k = lane mod ATTN_BLOCK over the block in order. It skips
// the keys (queries) that causality masks, which add exactly 0 on the host, and the blocks
// of keys wholly before a sliding window (attn_window_begin). Lavapipe ends
// every loop of a shader invocation after 65535 passes in all (LP_MAX_TGSI_LOOP_ITERATIONS),
// so the launches refuse more keys than fit there (vulkan_default_ops.c counts the passes);
// the forward's inner loops take ATTN_UNROLL iterations a pass (ATTN_FOR_EACH).
#extension GL_EXT_control_flow_attributes : require
#define ATTN_BLOCK 64
#define ATTN_UNROLL 8
// for (uint i = 0; i < n; i++) BODY, in that order, ATTN_UNROLL iterations per loop pass: the
// forward's inner loops, so that lavapipe's bound on passes (above) goes 8 times as far
#define ATTN_FOR_EACH(i, n)                                                                         \
	for (uint i##_0 = 0; i##_0 < (n); i##_0 += ATTN_UNROLL)                                    \
		[[unroll]] for (uint i = i##_0, i##_u = 0; i##_u < ATTN_UNROLL; i++, i##_u++)      \
			if (i < (n))
#define ATTN_DIMS (DATAFLOW_ATTENTION_MAX_HEAD_DIM / ATTN_BLOCK) // output dimensions per lane
layout(local_size_x = ATTN_BLOCK) in;
#define ATTN_MAX_D DATAFLOW_ATTENTION_MAX_HEAD_DIM
#define ATTN_LOG2E 1.44269504088896340736
#define ATTN_LN2 0.69314718055994530942
#define NEG_INF uintBitsToFloat(0xff800000u)

// 2^x as the host's attn_exp2: x clamped to -127 (NaN too, then exactly 0 at -127),
// 2^x = 2^n p(f), n = rint(x), p the degree-7 Taylor polynomial of e^(f ln 2), Horner in fma.
float attn_exp2(float x)
{
	x = x > -127.0 ? x : -127.0;
	precise float n = roundEven(x), f = x - n;
	precise float q = 1.52527338040598403e-05;
	q = fma(q, f, 0.000154035303933816099);
	q = fma(q, f, 0.00133335581464284434);
	q = fma(q, f, 0.00961812910762847716);
	q = fma(q, f, 0.0555041086648215800);
	q = fma(q, f, 0.240226506959100712);
	q = fma(q, f, 0.693147180559945309);
	q = fma(q, f, 1.0);
	precise float r = q * uintBitsToFloat(uint(int(n) + 127) << 23);
	return r;
}

// The first key a query at key position `last` reads under a sliding window w > 0 (it sees
// keys last - w < j <= last): the start of the block of ATTN_BLOCK keys from klo that holds
// last - w + 1, as the host skips key tiles (the blocks wholly before it add exactly 0).
uint attn_window_begin(uint klo, int64_t last, int64_t w)
{
	int64_t first = last - w + 1 - int64_t(klo);
	return w > 0 && first > 0 ? klo + uint(first / ATTN_BLOCK) * ATTN_BLOCK : klo;
}

// The sequence holding token t of `total`, from untrusted offsets cu[0..num_seqs]: offsets are
// clamped to [0, total] and each range starts where the previous one ended (so sequence s is
// [max(c_0..c_s), max(c_0..c_s+1)), the host's Seq_Cursor); ATTN_SEQ_OF sets s (num_seqs if t
// is in none) and the range [lo, hi). A second array of offsets (cu2 over total2) is walked
// in step, giving [lo2, hi2) of the same sequence (attention_kv's keys).
uint attn_clamp(int x, uint total)
{
	return uint(clamp(int64_t(x), int64_t(0), int64_t(total)));
}

#define ATTN_SEQ_OF(t, cu, total, cu2, total2, num_seqs, s, lo, hi, lo2, hi2)                       \
	{                                                                                          \
		hi = attn_clamp(cu.v[0], total);                                                   \
		hi2 = attn_clamp(cu2.v[0], total2);                                                \
		for (s = 0; s < num_seqs; s++) {                                                   \
			lo = hi, lo2 = hi2;                                                        \
			hi = max(attn_clamp(cu.v[s + 1], total), lo);                              \
			hi2 = max(attn_clamp(cu2.v[s + 1], total2), lo2);                          \
			if (t < hi)                                                                \
				break;                                                             \
		}                                                                                  \
		if (s < num_seqs && t < lo)                                                        \
			s = num_seqs;                                                              \
	}
