/* attention forward, FlashAttention-2 style over packed variable-length sequences; also
 * attention_kv, the same with separate query and key sequences (a KV cache). For each
 * sequence, query head h (kv head h / (Hq / Hkv)) and query i:
 *   s_ij = scale * q_i . k_j          (causal: only keys j <= i + k_len - q_len of the same
 *                                      sequence; k_len = q_len for attention; a sliding window
 *                                      w also hides j <= i + k_len - q_len - w)
 *   o_i = sum_j softmax_j(s_ij) v_j,  lse_i = log sum_j exp(s_ij)
 * One work item is (sequence, query head, block of 64 queries). Keys are visited in blocks
 * of 64 with the online softmax: running max m and sum l per query, in base 2 (scale * log2 e
 * is folded into Q), O rescaled by 2^(m_old - m_new) whenever the max grows. Memory is the
 * item's fp32 tiles only; nothing of size tokens^2 exists. */
#include "attention.h"
#include "dataflow/attention_args.h"

typedef Dataflow_Attention_Kv_Args Fwd_Args;

/* Queries [q0, q0 + nq) of head h; the sequence's keys are [klo, khi). Causal, bottom-right
 * aligned: query q0 + i sees keys j <= q0 + i + off, off = khi - (end of the sequence's
 * queries), i.e. query i of q_len sees key j of k_len when j <= i + k_len - q_len. */
static void fwd_item(const Fwd_Args *x, DataflowDatatype dt, const Attn_Tiles *t, int64_t klo, int64_t khi,
		     int64_t off, int64_t q0, int nq, int64_t h)
{
	const int d = (int)x->head_dim, dp = (d + 15) / 16 * 16;
	const int64_t hq = x->num_q_heads, hkv = x->num_kv_heads, hk = h / (hq / hkv);
	const size_t es = dataflow_datatype_size(dt);
	float qrows[ATTN_BLOCK * ATTN_MAX_HEAD_DIM], qt[ATTN_MAX_HEAD_DIM * ATTN_BLOCK];
	float kv[ATTN_BLOCK * ATTN_MAX_HEAD_DIM], o[ATTN_BLOCK * ATTN_MAX_HEAD_DIM];
	float s[ATTN_BLOCK * ATTN_BLOCK], m[ATTN_BLOCK], l[ATTN_BLOCK];

	attn_load_rows(qrows, dp, (const char *)x->q + (size_t)((q0 * hq + h) * d) * es, hq * d, dt, nq,
		       ATTN_BLOCK, d);
	attn_transpose(qt, qrows, dp, d, x->scale * ATTN_LOG2E);
	memset(o, 0, sizeof(float) * ATTN_BLOCK * dp);
	for (int i = 0; i < ATTN_BLOCK; i++) {
		m[i] = -INFINITY;
		l[i] = 0.0f;
	}
	int64_t kend = x->causal && q0 + nq + off < khi ? q0 + nq + off : khi;
	for (int64_t kb = attn_window_key_start(klo, q0 + off, x->window); kb < kend; kb += ATTN_BLOCK) {
		int nk = (int)(kend - kb < ATTN_BLOCK ? kend - kb : ATTN_BLOCK);
		const char *kv_row0 = (const char *)x->k + (size_t)((kb * hkv + hk) * d) * es;
		attn_load_rows(kv, dp, kv_row0, hkv * d, dt, nk, nk, d);
		t->qk(kv, nk, dp, qt, d, s);
		if (x->causal && kb + nk - 1 > q0 + off)
			attn_mask_causal(s, nk, kb, q0 + off);
		if (attn_window_cuts(x->window, kb, q0 + off))
			attn_mask_window(s, nk, kb, q0 + off, x->window);

		attn_softmax_tile(t, s, nk, m, l, o, nq, dp);

		/* o_i += sum_j p_ji v_j */
		kv_row0 = (const char *)x->v + (size_t)((kb * hkv + hk) * d) * es;
		attn_load_rows(kv, dp, kv_row0, hkv * d, dt, nk, nk, d);
		t->acc(o, nq, dp, s, 1, ATTN_BLOCK, nk, kv);
	}
	/* A query that sees no key (q_len > k_len) gets out = 0 and lse = -inf. */
	for (int i = 0; i < nq; i++) {
		int seen = l[i] > 0.0f;
		attn_store_rows((char *)x->out + (size_t)(((q0 + i) * hq + h) * d) * es, 0, dt, o + i * dp, dp, 1, d,
				seen ? 1.0f / l[i] : 0.0f);
		x->lse[h * x->total_q + q0 + i] = seen ? (m[i] + log2f(l[i])) * ATTN_LN2 : -INFINITY;
	}
}

/* Items are (query block of a sequence, head); the query and key ranges of each sequence come
 * from two cursors over the untrusted cu_seqlens_q and cu_seqlens_k. */
static void fwd(const Fwd_Args *x, int part, int num_parts, DataflowDatatype dt)
{
	Attn_Tiles t = attn_tiles();
	const int64_t hq = x->num_q_heads;
	int64_t items = attn_max_blocks(x->total_q, x->num_seqs) * hq, begin, end;
	dataflow_part_range(items, part, num_parts, 1, &begin, &end);
	Seq_Cursor c = seq_cursor(x->cu_seqlens_q, x->num_seqs, x->total_q);
	Seq_Cursor ck = seq_cursor(x->cu_seqlens_k, x->num_seqs, x->total_k);
	for (int64_t item = begin; item < end; item++) {
		int64_t b = seq_cursor_find(&c, item / hq);
		if (b < 0)
			break;
		seq_cursor_seek(&ck, c.s);
		int64_t q0 = c.lo + b * ATTN_BLOCK;
		int nq = (int)(c.hi - q0 < ATTN_BLOCK ? c.hi - q0 : ATTN_BLOCK);
		fwd_item(x, dt, &t, ck.lo, ck.hi, ck.hi - c.hi, q0, nq, item % hq);
	}
}

#define ATTENTION_KERNELS(name, args_fn)                                                  \
	void dataflow_host_##name##_fp32(void **args, int part, int num_parts)             \
	{                                                                                  \
		Fwd_Args x = args_fn(args);                                                \
		fwd(&x, part, num_parts, DATAFLOW_FP32);                                   \
	}                                                                                  \
	void dataflow_host_##name##_bf16(void **args, int part, int num_parts)             \
	{                                                                                  \
		Fwd_Args x = args_fn(args);                                                \
		fwd(&x, part, num_parts, DATAFLOW_BF16);                                   \
	}                                                                                  \
	void dataflow_host_##name##_fp16(void **args, int part, int num_parts)             \
	{                                                                                  \
		Fwd_Args x = args_fn(args);                                                \
		fwd(&x, part, num_parts, DATAFLOW_FP16);                                   \
	}

ATTENTION_KERNELS(attention, dataflow_attention_as_kv_args)
ATTENTION_KERNELS(attention_kv, dataflow_attention_kv_args)

/* cu_seqlens is not read here: it may be written by earlier
 * work on the stream, so parts cover an upper bound of the blocks. */
static int fwd_parts(Fwd_Args x)
{
	return attn_num_parts(attn_max_blocks(x.total_q, x.num_seqs) * x.num_q_heads);
}

DATAFLOW_HOST_LAUNCH(dataflow_host_attention_launch, Fwd_Args, dataflow_attention_as_kv_args, fwd_parts(a))
DATAFLOW_HOST_LAUNCH(dataflow_host_attention_kv_launch, Fwd_Args, dataflow_attention_kv_args, fwd_parts(a))
