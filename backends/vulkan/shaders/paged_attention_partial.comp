#version 460
// paged_attention_partial: one workgroup per (split, query head, query token) item, the
// forward of attention_fwd.glsl over the split's keys [k0, k1) gathered from the pages:
// lane j scores key kb + j of a block, lane 0 runs the online softmax (base 2), each lane
// accumulates the head dimensions lane mod 64; the item writes its unnormalized o, m and l
// (NaN when a page id of [k0, k1) is outside the pool or the length passes the table).
#include "common.glsl"
#include "op_params.glsl"
#include "attention.glsl"
// its int64 scalars as int: the arguments would take 148 bytes, the devices may allow 128
layout(push_constant) uniform Args { DATAFLOW_PAGED_ATTENTION_PARTIAL_PARAMS_NARROW(REF(DT_dtype)) } p;
shared float qs[ATTN_MAX_D], ps[ATTN_BLOCK], block_alpha;
shared uint page_bad;

// The pool row of key `key` of sequence seq (the page clamped into the pool: a bad page is
// reported by the scan of the split's pages, and the load stays in range either way).
uint key_row(uint seq, uint key, uint hk)
{
	uint ps_ = uint(p.page_size);
	int page = clamp(p.page_table.v[seq * uint(p.max_pages) + key / ps_], 0, p.num_pages - 1);
	return ((uint(page) * ps_ + key % ps_) * uint(p.num_kv_heads) + hk) * uint(p.head_dim);
}

void main()
{
	uint lane = gl_LocalInvocationID.x, hq = uint(p.num_q_heads), d = uint(p.head_dim), tq = uint(p.total_q);
	uint batch = uint(p.batch), ps_ = uint(p.page_size), split_size = uint(p.split_size);
	uint table_keys = uint(p.max_pages) * ps_, splits = (table_keys + split_size - 1) / split_size;
	for (uint item = gl_WorkGroupID.x; item < splits * tq * hq; item += gl_NumWorkGroups.x) {
		uint split = item / (tq * hq), h = item % (tq * hq) / tq, t = item % tq, seq, lo, hi, lo2, hi2;
		uint hk = h / (hq / uint(p.num_kv_heads));
		ATTN_SEQ_OF(t, p.cu_seqlens_q, tq, p.cu_seqlens_q, tq, batch, seq, lo, hi, lo2, hi2)
		if (seq >= batch)
			continue; // uniform in the workgroup; rows outside every sequence are not written
		int len_ = max(p.seq_lens.v[seq], 0);
		bool table_ok = uint(len_) <= table_keys;
		uint len = min(uint(len_), table_keys);
		uint k0 = split * split_size, k1 = max(min(k0 + split_size, len), k0);
		// causal, bottom-right: query t sees keys j <= len - (hi - lo) + (t - lo)
		int64_t last = int64_t(len) - int64_t(hi) + int64_t(t);
		uint kend = uint(clamp(last + 1, int64_t(k0), int64_t(k1)));
		if (lane == 0)
			page_bad = table_ok ? 0u : 1u;
		barrier();
		for (uint pg = k0 / ps_ + lane; k1 > k0 && pg <= (k1 - 1) / ps_; pg += ATTN_BLOCK) {
			int page = p.page_table.v[seq * uint(p.max_pages) + pg];
			if (page < 0 || page >= p.num_pages)
				page_bad = 1u;
		}
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
		for (uint kb = k0; kb < kend; kb += ATTN_BLOCK) {
			uint nk = min(kend - kb, uint(ATTN_BLOCK));
			if (lane < nk) {
				uint krow = key_row(seq, kb + lane, hk);
				precise float acc = 0.0;
				ATTN_FOR_EACH(k, d)
					acc = fma(LOAD(DT_dtype, p.k_pages.v[krow + k]), qs[k], acc);
				ps[lane] = acc;
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
					o[c] = fma(ps[j], LOAD(DT_dtype, p.v_pages.v[key_row(seq, kb + j, hk) + k]), o[c]);
			}
			barrier(); // ps is read before the next block writes it
		}
		uint row = (split * tq + t) * hq + h;
		for (uint c = 0, k = lane; k < d; c++, k += ATTN_BLOCK)
			p.partial_o.v[row * d + k] = o[c];
		if (lane == 0) {
			float nan_ = uintBitsToFloat(0x7fc00000u);
			p.partial_ml.v[2 * row] = page_bad != 0u ? nan_ : m;
			p.partial_ml.v[2 * row + 1] = page_bad != 0u ? nan_ : l;
		}
		barrier(); // qs and page_bad are read before the next item writes them
	}
}
