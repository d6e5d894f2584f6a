/* paged_attention (flash-decoding over a paged KV cache), the two halves of the composite:
 *
 * partial, one work item per (sequence b, kv head, split of split_size keys): the rows are the
 * sequence's new tokens times the g = Hq / Hkv query heads sharing the kv head (token-major),
 * 64 at a time as the lanes of attention.h's tiles; keys are gathered from the pages 64 at a
 * time and run through attention's online softmax (base 2, scale * log2 e folded into Q):
 *   s_rj = q_r . k_j (keys j <= seq_len - q_len + token(r)),  m_r = max_j s_rj,
 *   l_r = sum_j 2^(s_rj - m_r),  o_r = sum_j 2^(s_rj - m_r) v_j    (o unnormalized)
 * combine, per (query token, head): M = max_s m_s, L = sum_s 2^(m_s - M) l_s,
 *   out = (sum_s 2^(m_s - M) o_s) / L,  lse = (M + log2 L) ln 2,  splits in order.
 * Splits start at multiples of split_size (a multiple of 64), so the key tiles are attention's
 * and a sequence of at most split_size keys gets attention_kv's bits. A page id outside the
 * pool or a length past the table makes the split's m and l NaN, so the output is NaN. */
#include "attention.h"

typedef Dataflow_Paged_Attention_Partial_Args Partial_Args;
typedef Dataflow_Paged_Attention_Combine_Args Combine_Args;

static int64_t num_splits(const Partial_Args *x)
{
	return (x->max_pages * x->page_size + x->split_size - 1) / x->split_size;
}

/* kv[j] = row (key kb + j, kv head hk) of pages for j < nk, gathered page by page; returns 0 when
 * a page id of sequence b is outside the pool (its rows are left zero). */
static int gather_keys(float *kv, int dp, const void *pages, const Partial_Args *x, DataflowDatatype dt, int64_t b,
		       int64_t hk, int64_t kb, int nk)
{
	const size_t es = dataflow_datatype_size(dt);
	const int64_t hkv = x->num_kv_heads, d = x->head_dim, ps = x->page_size;
	int ok = 1;
	for (int j = 0; j < nk;) {
		int64_t key = kb + j, slot = key % ps;
		int run = (int)(ps - slot < nk - j ? ps - slot : nk - j);
		int32_t page = x->page_table[b * x->max_pages + key / ps];
		if (page < 0 || page >= x->num_pages) {
			ok = 0;
			memset(kv + (size_t)j * dp, 0, sizeof(float) * (size_t)run * dp);
		} else {
			const char *src = (const char *)pages + (size_t)(((page * ps + slot) * hkv + hk) * d) * es;
			attn_load_rows(kv + (size_t)j * dp, dp, src, hkv * d, dt, run, run, (int)d);
		}
		j += run;
	}
	return ok;
}

/* Rows [r0, r0 + nr) of sequence b's (token, head-in-group) rows over the keys [k0, k1). */
static void partial_rows(const Partial_Args *x, DataflowDatatype dt, const Attn_Tiles *t, int64_t b, int64_t hk,
			 int64_t q_lo, int64_t q_len, int64_t seq_len, int64_t split, int64_t k0, int64_t k1,
			 int table_ok, int64_t r0, int nr)
{
	const int d = (int)x->head_dim, dp = (d + 15) / 16 * 16;
	const int64_t hq = x->num_q_heads, g = hq / x->num_kv_heads;
	const size_t es = dataflow_datatype_size(dt);
	float qrows[ATTN_BLOCK * ATTN_MAX_HEAD_DIM], qt[ATTN_MAX_HEAD_DIM * ATTN_BLOCK];
	float kv[ATTN_BLOCK * ATTN_MAX_HEAD_DIM], o[ATTN_BLOCK * ATTN_MAX_HEAD_DIM];
	float s[ATTN_BLOCK * ATTN_BLOCK], m[ATTN_BLOCK], l[ATTN_BLOCK];
	int64_t last_key[ATTN_BLOCK]; /* row i sees keys <= last_key[i] */

	for (int i = 0; i < ATTN_BLOCK; i++) {
		int64_t r = r0 + i, tok = r / g;
		const char *src = (const char *)x->q + (size_t)(((q_lo + tok) * hq + hk * g + r % g) * d) * es;
		attn_load_rows(qrows + (size_t)i * dp, dp, src, 0, dt, i < nr, 1, d);
		last_key[i] = seq_len - q_len + tok;
		m[i] = -INFINITY;
		l[i] = 0.0f;
	}
	attn_transpose(qt, qrows, dp, d, x->scale * ATTN_LOG2E);
	memset(o, 0, sizeof(float) * ATTN_BLOCK * dp);
	int ok = table_ok;
	for (int64_t kb = k0; kb < k1; kb += ATTN_BLOCK) {
		int nk = (int)(k1 - kb < ATTN_BLOCK ? k1 - kb : ATTN_BLOCK);
		ok &= gather_keys(kv, dp, x->k_pages, x, dt, b, hk, kb, nk);
		t->qk(kv, nk, dp, qt, d, s);
		if (kb + nk - 1 > last_key[0])
			for (int j = 0; j < nk; j++)
				for (int i = 0; i < nr; i++)
					if (kb + j > last_key[i])
						s[j * ATTN_BLOCK + i] = -INFINITY;

		attn_softmax_tile(t, s, nk, m, l, o, nr, dp);
		ok &= gather_keys(kv, dp, x->v_pages, x, dt, b, hk, kb, nk);
		t->acc(o, nr, dp, s, 1, ATTN_BLOCK, nk, kv);
	}
	for (int i = 0; i < nr; i++) {
		int64_t r = r0 + i, row = ((split * x->total_q + q_lo + r / g) * hq + hk * g + r % g);
		memcpy(x->partial_o + row * d, o + (size_t)i * dp, sizeof(float) * (size_t)d);
		x->partial_ml[2 * row] = ok ? m[i] : NAN;
		x->partial_ml[2 * row + 1] = ok ? l[i] : NAN;
	}
}

static void partial(const Partial_Args *x, int part, int num_parts, DataflowDatatype dt)
{
	Attn_Tiles t = attn_tiles();
	const int64_t hkv = x->num_kv_heads, splits = num_splits(x), g = x->num_q_heads / hkv;
	const int64_t table_keys = x->max_pages * x->page_size;
	int64_t begin, end;
	dataflow_part_range(x->batch * hkv * splits, part, num_parts, 1, &begin, &end);
	Seq_Cursor c = seq_cursor(x->cu_seqlens_q, x->batch, x->total_q);
	for (int64_t item = begin; item < end; item++) {
		int64_t b = item / (hkv * splits), hk = item / splits % hkv, split = item % splits;
		seq_cursor_seek(&c, b);
		int64_t len = x->seq_lens[b] < 0 ? 0 : x->seq_lens[b];
		int table_ok = len <= table_keys;
		len = table_ok ? len : table_keys;
		int64_t k0 = split * x->split_size, k1 = k0 + x->split_size < len ? k0 + x->split_size : len;
		for (int64_t r0 = 0; r0 < (c.hi - c.lo) * g; r0 += ATTN_BLOCK) {
			int nr = (int)((c.hi - c.lo) * g - r0 < ATTN_BLOCK ? (c.hi - c.lo) * g - r0 : ATTN_BLOCK);
			partial_rows(x, dt, &t, b, hk, c.lo, c.hi - c.lo, len, split, k0, k1 > k0 ? k1 : k0,
				     table_ok, r0, nr);
		}
	}
}

/* One item per (query token, head) of the tokens inside a sequence. */
static void combine(const Combine_Args *x, int part, int num_parts, DataflowDatatype dt)
{
	const int64_t hq = x->num_q_heads, d = x->head_dim, rows = x->total_q * hq;
	int64_t begin, end;
	dataflow_part_range(x->total_q, part, num_parts, 1, &begin, &end);
	Seq_Cursor c = seq_cursor(x->cu_seqlens_q, x->batch, x->total_q);
	const size_t es = dataflow_datatype_size(dt);
	float acc[ATTN_MAX_HEAD_DIM];
	for (int64_t tok = begin; tok < end; tok++) {
		while (c.s < c.num_seqs && tok >= c.hi)
			seq_cursor_seek(&c, c.s + 1);
		if (c.s >= c.num_seqs)
			break;
		if (tok < c.lo)
			continue;
		for (int64_t h = 0; h < hq; h++) {
			int64_t row = tok * hq + h;
			float M = -INFINITY, L = 0.0f;
			int bad = 0;
			for (int64_t s = 0; s < x->num_splits; s++) {
				const float *ml = x->partial_ml + 2 * (s * rows + row);
				bad |= isnan(ml[1]);
				M = ml[1] > 0.0f && ml[0] > M ? ml[0] : M;
			}
			memset(acc, 0, sizeof(float) * (size_t)d);
			for (int64_t s = 0; s < x->num_splits && M > -INFINITY; s++) {
				const float *ml = x->partial_ml + 2 * (s * rows + row);
				if (!(ml[1] > 0.0f))
					continue;
				float w = exp2f(ml[0] - M);
				const float *po = x->partial_o + (s * rows + row) * d;
				for (int64_t k = 0; k < d; k++)
					acc[k] = fmaf(w, po[k], acc[k]);
				L = fmaf(w, ml[1], L);
			}
			float inv = bad ? NAN : L > 0.0f ? 1.0f / L : 0.0f;
			attn_store_rows((char *)x->out + (size_t)(row * d) * es, 0, dt, acc, (int)d, 1, (int)d, inv);
			if (x->lse)
				x->lse[h * x->total_q + tok] =
					bad ? NAN : L > 0.0f ? (M + log2f(L)) * ATTN_LN2 : -INFINITY;
		}
	}
}

#define PAGED_ATTENTION_KERNELS(DT, TAG)                                                         \
	void dataflow_host_paged_attention_partial_##DT(void **args, int part, int num_parts)    \
	{                                                                                        \
		Partial_Args x = dataflow_paged_attention_partial_args(args);                    \
		partial(&x, part, num_parts, TAG);                                               \
	}                                                                                        \
	void dataflow_host_paged_attention_combine_##DT(void **args, int part, int num_parts)    \
	{                                                                                        \
		Combine_Args x = dataflow_paged_attention_combine_args(args);                    \
		combine(&x, part, num_parts, TAG);                                               \
	}

PAGED_ATTENTION_KERNELS(fp32, DATAFLOW_FP32)
PAGED_ATTENTION_KERNELS(fp16, DATAFLOW_FP16)
PAGED_ATTENTION_KERNELS(bf16, DATAFLOW_BF16)

DATAFLOW_HOST_LAUNCH(dataflow_host_paged_attention_partial_launch, Partial_Args, dataflow_paged_attention_partial_args,
		     attn_num_parts(a.batch * a.num_kv_heads * num_splits(&a)))
DATAFLOW_HOST_LAUNCH(dataflow_host_paged_attention_combine_launch, Combine_Args, dataflow_paged_attention_combine_args,
		     attn_num_parts(a.total_q))
