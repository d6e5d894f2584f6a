// The forward of attention and attention_kv (their .comp files define the push constants p
// and Q_TOTAL, K_TOTAL, CU_Q, CU_K): one workgroup per (query head, query token), online
// softmax over key blocks as the host's fwd_item:
//   m_new = max(m, s_j of the block);  alpha = 2^(m - m_new);  p_j = 2^(s_j - m_new)
//   l = alpha l + sum_j p_j;  o = alpha o + sum_j p_j v_j
//   out = o * (1 / l), lse = (m + log2 l) ln 2; a query that sees no key: out = 0, lse = -inf.
// Lane 0 keeps m and l and forms the block's p_j in order.
shared float qs[ATTN_MAX_D], ps[ATTN_BLOCK], block_alpha, row_r;

void main()
{
	uint lane = gl_LocalInvocationID.x, hq = uint(p.num_q_heads), d = uint(p.head_dim);
	uint tq = uint(Q_TOTAL), tk = uint(K_TOTAL), num_seqs = uint(p.num_seqs), hkv = uint(p.num_kv_heads);
	for (uint item = gl_WorkGroupID.x; item < tq * hq; item += gl_NumWorkGroups.x) {
		uint h = item / tq, t = item % tq, hk = h / (hq / hkv), seq, qlo, qhi, klo, khi;
		ATTN_SEQ_OF(t, CU_Q, tq, CU_K, tk, num_seqs, seq, qlo, qhi, klo, khi)
		if (seq >= num_seqs)
			continue; // uniform in the workgroup; rows outside every sequence are not written
		// causal, bottom-right aligned: query t sees keys j <= t + khi - qhi = last; with a
		// sliding window w also only j > last - w
		int64_t last = int64_t(t) + int64_t(khi) - int64_t(qhi), w = p.window;
		uint kend = p.causal != 0 ? uint(clamp(last + 1, int64_t(klo), int64_t(khi))) : khi;
		uint qrow = (t * hq + h) * d;
		precise float sl = p.scale * float(ATTN_LOG2E);
		for (uint k = lane; k < d; k += ATTN_BLOCK) {
			precise float x = sl * LOAD(DT_dtype, p.q.v[qrow + k]);
			qs[k] = x;
		}
		float o[ATTN_DIMS];
		for (int c = 0; c < ATTN_DIMS; c++)
			o[c] = 0.0;
		precise float m = NEG_INF, l = 0.0; // lane 0's
		barrier();
		for (uint kb = attn_window_begin(klo, last, w); kb < kend; kb += ATTN_BLOCK) {
			uint nk = min(kend - kb, uint(ATTN_BLOCK));
			if (lane < nk) {
				uint krow = ((kb + lane) * hkv + hk) * d;
				precise float acc = 0.0;
				ATTN_FOR_EACH(k, d)
					acc = fma(LOAD(DT_dtype, p.k.v[krow + k]), qs[k], acc);
				ps[lane] = w > 0 && int64_t(kb + lane) <= last - w ? NEG_INF : acc;
			}
			barrier();
			if (lane == 0) {
				precise float mnew = m;
				ATTN_FOR_EACH(j, nk)
					mnew = ps[j] > mnew ? ps[j] : mnew;
				float alpha = attn_exp2(m - mnew);
				l *= alpha;
				ATTN_FOR_EACH(j, nk) {
					ps[j] = attn_exp2(ps[j] - mnew);
					l += ps[j];
				}
				m = mnew;
				block_alpha = alpha;
			}
			barrier();
			for (uint c = 0, k = lane; k < d; c++, k += ATTN_BLOCK) {
				o[c] *= block_alpha;
				ATTN_FOR_EACH(j, nk)
					o[c] = fma(ps[j], LOAD(DT_dtype, p.v.v[((kb + j) * hkv + hk) * d + k]), o[c]);
			}
			barrier(); // ps is read before the next block writes it
		}
		if (lane == 0) {
			bool seen = l > 0.0;
			row_r = seen ? 1.0 / l : 0.0;
			precise float lse = (m + log2(l)) * float(ATTN_LN2);
			p.lse.v[h * tq + t] = seen ? lse : NEG_INF;
		}
		barrier();
		for (uint c = 0, k = lane; k < d; c++, k += ATTN_BLOCK) {
			precise float y = row_r * o[c];
			p.out_.v[qrow + k] = STORE(DT_dtype, y);
		}
		barrier(); // qs and row_r are read before the next item writes them
	}
}
