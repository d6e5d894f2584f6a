// The backward of attention and attention_kv (their .comp files define the push constants p,
// Q_TOTAL, K_TOTAL, CU_Q, CU_K, and STORE_KV_GRAD(tensor, index, x), how an element of dk or dv
// is written): dq, dk, dv as the host's attention_bwd.c, with p_ij = 2^(s_ij - lse_i log2 e)
// recomputed from the saved lse and D_i from attention_bwd_delta:
//   dp_ij = do_i . v_j,  ds_ij = p_ij (dp_ij - D_i)
//   dv_j = sum_i p_ij do_i,  dk_j = scale sum_i ds_ij q_i,  dq_i = scale sum_j ds_ij k_j
// Causal masking is bottom-right: query i of a sequence with queries [qlo, qhi) and keys
// [klo, khi) sees key j when j <= i + khi - qhi (for attention the offset is 0), and with a
// sliding window w only when also j > i + khi - qhi - w. The causal word carries w
// (vulkan_default_ops.c: 0 full attention, else causal with a window of that many keys).
// One dispatch, two kinds of workgroup item (attention.glsl), each the only writer of its
// rows: the first K_TOTAL * num_kv_heads own a key of a kv head (dk, dv: over the group's
// query heads in order, then the queries that see it in order, a block of ATTN_BLOCK queries
// at a time), the rest a query of a query head (dq: over the keys it sees in order, a block at
// a time). Sums in the host's order, so the bits match it where fma and exp2 round alike.

// the item's own row(s) in fp32: the key's k and v, or the query's q (scaled by scale log2 e)
// and dout; the block's p and ds
shared float row_a[ATTN_MAX_D], row_b[ATTN_MAX_D], ps[ATTN_BLOCK], dss[ATTN_BLOCK];

// p and ds of query i (head h) and key j (kv head hk); qk and dp are scaled q_i . k_j and
// dout_i . v_j, the host's operand order: s = fma(k, q * sl, s), dp = fma(v, dout, dp)
void p_ds(uint i, uint h, float s, float dp)
{
	uint tq = uint(Q_TOTAL);
	precise float lse2 = p.lse.v[h * tq + i] * float(ATTN_LOG2E);
	float pij = attn_exp2(s - lse2);
	precise float ds = pij * (dp - p.D.v[h * tq + i]);
	ps[gl_LocalInvocationID.x] = pij;
	dss[gl_LocalInvocationID.x] = ds;
}

void main()
{
	uint lane = gl_LocalInvocationID.x, hq = uint(p.num_q_heads), hkv = uint(p.num_kv_heads);
	uint d = uint(p.head_dim), tq = uint(Q_TOTAL), tk = uint(K_TOTAL), num_seqs = uint(p.num_seqs);
	uint group = hq / hkv;
	precise float sl = p.scale * float(ATTN_LOG2E);
	int64_t w = int64_t(p.causal); // INT32_MAX: no window (no sequence reaches that far)
	for (uint item = gl_WorkGroupID.x; item < tk * hkv + tq * hq; item += gl_NumWorkGroups.x) {
		bool key = item < tk * hkv; // uniform in the workgroup, as everything below but lane
		uint it = key ? item : item - tk * hkv, total = key ? tk : tq;
		uint h = it / total, t = it % total, seq, qlo, qhi, klo, khi;
		if (key)
			ATTN_SEQ_OF(t, CU_K, tk, CU_Q, tq, num_seqs, seq, klo, khi, qlo, qhi)
		else
			ATTN_SEQ_OF(t, CU_Q, tq, CU_K, tk, num_seqs, seq, qlo, qhi, klo, khi)
		if (seq >= num_seqs)
			continue; // rows outside every sequence are not written
		int64_t off = int64_t(khi) - int64_t(qhi);
		float a[ATTN_DIMS], b[ATTN_DIMS]; // dk and dv, or dq and unused
		for (int c = 0; c < ATTN_DIMS; c++)
			a[c] = b[c] = 0.0;
		if (key) { // key t of kv head h: seen by queries t - off <= i < t - off + w
			uint row = (t * hkv + h) * d;
			uint ibegin = p.causal != 0 ? uint(clamp(int64_t(t) - off, int64_t(qlo), int64_t(qhi))) : qlo;
			uint iend = p.causal != 0 ? uint(clamp(int64_t(t) - off + w, int64_t(qlo), int64_t(qhi))) : qhi;
			for (uint k = lane; k < d; k += ATTN_BLOCK) {
				row_a[k] = LOAD(DT_dtype, p.k.v[row + k]);
				row_b[k] = LOAD(DT_dtype, p.v.v[row + k]);
			}
			barrier();
			for (uint qh = h * group; qh < (h + 1) * group; qh++)
				for (uint i0 = ibegin; i0 < iend; i0 += ATTN_BLOCK) {
					uint nq = min(iend - i0, uint(ATTN_BLOCK));
					if (lane < nq) {
						uint qrow = ((i0 + lane) * hq + qh) * d;
						precise float s = 0.0, dp = 0.0;
						for (uint k = 0; k < d; k++) {
							precise float qk = sl * LOAD(DT_dtype, p.q.v[qrow + k]);
							s = fma(row_a[k], qk, s);
						}
						for (uint k = 0; k < d; k++)
							dp = fma(row_b[k], LOAD(DT_dtype, p.dout.v[qrow + k]), dp);
						p_ds(i0 + lane, qh, s, dp);
					}
					barrier();
					for (uint c = 0, k = lane; k < d; c++, k += ATTN_BLOCK)
						for (uint i = 0; i < nq; i++) {
							uint qrow = ((i0 + i) * hq + qh) * d;
							b[c] = fma(ps[i], LOAD(DT_dtype, p.dout.v[qrow + k]), b[c]);
							a[c] = fma(dss[i], LOAD(DT_dtype, p.q.v[qrow + k]), a[c]);
						}
					barrier(); // ps, dss are read before the next block writes them
				}
			for (uint c = 0, k = lane; k < d; c++, k += ATTN_BLOCK) {
				precise float x = p.scale * a[c];
				STORE_KV_GRAD(p.dk, row + k, x);
				STORE_KV_GRAD(p.dv, row + k, b[c]);
			}
		} else { // query t of head h: sees keys t + off - w < j < t + off + 1
			uint hk = h / group, qrow = (t * hq + h) * d;
			int64_t last = int64_t(t) + off;
			uint kend = p.causal != 0 ? uint(clamp(last + 1, int64_t(klo), int64_t(khi))) : khi;
			for (uint k = lane; k < d; k += ATTN_BLOCK) {
				precise float qk = sl * LOAD(DT_dtype, p.q.v[qrow + k]);
				row_a[k] = qk;
				row_b[k] = LOAD(DT_dtype, p.dout.v[qrow + k]);
			}
			barrier();
			for (uint kb = p.causal != 0 ? attn_window_begin(klo, last, w) : klo; kb < kend; kb += ATTN_BLOCK) {
				uint nk = min(kend - kb, uint(ATTN_BLOCK));
				if (lane < nk) {
					uint krow = ((kb + lane) * hkv + hk) * d;
					precise float s = 0.0, dp = 0.0;
					for (uint k = 0; k < d; k++)
						s = fma(LOAD(DT_dtype, p.k.v[krow + k]), row_a[k], s);
					for (uint k = 0; k < d; k++)
						dp = fma(LOAD(DT_dtype, p.v.v[krow + k]), row_b[k], dp);
					p_ds(t, h, p.causal != 0 && int64_t(kb + lane) <= last - w ? NEG_INF : s, dp);
				}
				barrier();
				for (uint c = 0, k = lane; k < d; c++, k += ATTN_BLOCK)
					for (uint j = 0; j < nk; j++)
						a[c] = fma(dss[j], LOAD(DT_dtype, p.k.v[((kb + j) * hkv + hk) * d + k]), a[c]);
				barrier();
			}
			for (uint c = 0, k = lane; k < d; c++, k += ATTN_BLOCK) {
				precise float x = p.scale * a[c];
				p.dq.v[qrow + k] = STORE(DT_dtype, x);
			}
		}
		barrier(); // row_a, row_b are read before the next item writes them
	}
}
