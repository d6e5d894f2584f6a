/* attention backward, FlashAttention-2 style, deterministic; also attention_kv_bwd, the same
 * with separate query and key sequences (bottom-right causal: query i of a sequence sees key
 * j when j <= i + off, off = k_len - q_len; 0 for attention; a sliding window w also hides
 * j <= i + off - w, and the tiles it hides wholly are skipped).
 * With p_ij = exp(s_ij - lse_i) recomputed per tile from the saved logsumexp and
 *   D_i = do_i . o_i                               (attention_bwd_delta, run first)
 *   dp_ij = do_i . v_j,  ds_ij = p_ij (dp_ij - D_i)
 *   dv_j = sum_i p_ij do_i,  dk_j = scale sum_i ds_ij q_i,  dq_i = scale sum_j ds_ij k_j
 * where for GQA the sums over i run over every query head of k_j's group.
 * Two kinds of work item, each the only writer of its outputs and summing in a fixed order,
 * so the bits never depend on the number of parts or threads:
 *   - (sequence, kv head, block of 64 keys): dk, dv of those keys, over the group's query
 *     heads in order, then query blocks in order;
 *   - (sequence, query head, block of 64 queries): dq, over key blocks in order.
 * s and p are computed twice (once per kind): 7 tile products instead of 5, in exchange
 * for no atomics and no dq partial sums. attention_kv_bwd adds dk, dv into fp32 rows
 * (a context's gradients summed over the chunks that attend to it). */
#include <stdlib.h>
#include <string.h>

#include "attention.h"

typedef struct {
	const void *dout, *q, *k, *v;
	const float *lse, *delta;
	const int32_t *cu_q, *cu_k;
	void *dq, *dk, *dv;
	int64_t total_q, total_k, num_seqs, hq, hkv, d;
	float scale;
	int causal;
	int64_t window; /* sliding window; 0: none */
	int accumulate; /* attention_kv_bwd: dk, dv are fp32 and added into */
} Bwd_Args;

static Bwd_Args bwd_args(void *const *args)
{
	Dataflow_Attention_Bwd_Args a = dataflow_attention_bwd_args(args);
	return (Bwd_Args){.dout = a.dout, .q = a.q, .k = a.k, .v = a.v, .lse = a.lse, .delta = a.D,
			  .cu_q = a.cu_seqlens, .cu_k = a.cu_seqlens, .dq = a.dq, .dk = a.dk, .dv = a.dv,
			  .total_q = a.total_tokens, .total_k = a.total_tokens, .num_seqs = a.num_seqs,
			  .hq = a.num_q_heads, .hkv = a.num_kv_heads, .d = a.head_dim, .scale = a.scale,
			  .causal = a.causal, .window = a.window};
}

static Bwd_Args kv_bwd_args(void *const *args)
{
	Dataflow_Attention_Kv_Bwd_Args a = dataflow_attention_kv_bwd_args(args);
	return (Bwd_Args){.dout = a.dout, .q = a.q, .k = a.k, .v = a.v, .lse = a.lse, .delta = a.D,
			  .cu_q = a.cu_seqlens_q, .cu_k = a.cu_seqlens_k, .dq = a.dq, .dk = a.dk, .dv = a.dv,
			  .total_q = a.total_q, .total_k = a.total_k, .num_seqs = a.num_seqs, .hq = a.num_q_heads,
			  .hkv = a.num_kv_heads, .d = a.head_dim, .scale = a.scale, .causal = a.causal,
			  .window = a.window, .accumulate = 1};
}

/* A sequence's queries [qlo, qhi) and keys [klo, khi); off = khi - qhi. */
typedef struct {
	int64_t qlo, qhi, klo, khi, off;
} Seq_Ranges;

static Seq_Ranges seq_ranges(const Seq_Cursor *cq, const Seq_Cursor *ck)
{
	return (Seq_Ranges){cq->lo, cq->hi, ck->lo, ck->hi, ck->hi - cq->hi};
}

/* dk or dv rows [k0, k0 + nk) of kv head hk from fp32 tile rows: written as scale * src in
 * the dtype, or (accumulate) scale * src added into the fp32 rows. */
static void store_kv_grad(const Bwd_Args *x, DataflowDatatype dt, void *dst, int64_t k0, int nk, int64_t hk,
			  const float *src, int dp, float scale)
{
	const int d = (int)x->d;
	int64_t row0 = (k0 * x->hkv + hk) * d, stride = x->hkv * d;
	if (!x->accumulate) {
		attn_store_rows((char *)dst + (size_t)row0 * dataflow_datatype_size(dt), stride, dt, src, dp, nk, d,
				scale);
		return;
	}
	for (int i = 0; i < nk; i++) {
		float *row = (float *)dst + row0 + i * stride;
		for (int k = 0; k < d; k++)
			row[k] += scale * src[(size_t)i * dp + k];
	}
}

/* The query side of a tile: queries [q0, q0 + nq) of head h, as rows and transposed. */
typedef struct {
	float q[ATTN_BLOCK * ATTN_MAX_HEAD_DIM], qt[ATTN_MAX_HEAD_DIM * ATTN_BLOCK];
	float dout[ATTN_BLOCK * ATTN_MAX_HEAD_DIM], doutt[ATTN_MAX_HEAD_DIM * ATTN_BLOCK];
	float lse2[ATTN_BLOCK], delta[ATTN_BLOCK]; /* lse in base 2; padded queries: +inf, 0 */
} Query_Tile;

static void load_query_tile(Query_Tile *qt, const Bwd_Args *x, DataflowDatatype dt, int64_t q0, int nq, int64_t h)
{
	const int d = (int)x->d, dp = (d + 15) / 16 * 16;
	const size_t es = dataflow_datatype_size(dt);
	size_t row0 = (size_t)((q0 * x->hq + h) * d) * es;
	attn_load_rows(qt->q, dp, (const char *)x->q + row0, x->hq * d, dt, nq, ATTN_BLOCK, d);
	attn_transpose(qt->qt, qt->q, dp, d, x->scale * ATTN_LOG2E);
	attn_load_rows(qt->dout, dp, (const char *)x->dout + row0, x->hq * d, dt, nq, ATTN_BLOCK, d);
	attn_transpose(qt->doutt, qt->dout, dp, d, 1.0f);
	for (int i = 0; i < ATTN_BLOCK; i++) {
		qt->lse2[i] = i < nq ? x->lse[h * x->total_q + q0 + i] * ATTN_LOG2E : INFINITY;
		qt->delta[i] = i < nq ? x->delta[h * x->total_q + q0 + i] : 0.0f;
	}
}

/* p^T and ds^T of keys [kb, kb + nk) (rows k, v: fp32, dp apart) against a query tile; query
 * q0 + i sees key j when j <= q0 + i + off. */
static void tile_p_ds(const Attn_Tiles *t, const Bwd_Args *x, const Query_Tile *qt, const float *k, const float *v,
		      int64_t kb, int nk, int64_t q0, int64_t off, float *p, float *ds)
{
	const int d = (int)x->d, dp = (d + 15) / 16 * 16;
	t->qk(k, nk, dp, qt->qt, d, p);
	if (x->causal && kb + nk - 1 > q0 + off)
		attn_mask_causal(p, nk, kb, q0 + off);
	if (attn_window_cuts(x->window, kb, q0 + off))
		attn_mask_window(p, nk, kb, q0 + off, x->window);
	t->exp2(p, nk, qt->lse2);
	t->qk(v, nk, dp, qt->doutt, d, ds);
	for (int j = 0; j < nk; j++)
		for (int i = 0; i < ATTN_BLOCK; i++)
			ds[j * ATTN_BLOCK + i] = p[j * ATTN_BLOCK + i] * (ds[j * ATTN_BLOCK + i] - qt->delta[i]);
}

/* The first query block (blocks of 64 from qlo) with a query that sees key k0 (causal). */
static int64_t first_query_block(const Bwd_Args *x, const Seq_Ranges *r, int64_t k0)
{
	int64_t first = k0 - r->off - r->qlo;
	return x->causal && first > 0 ? r->qlo + first / ATTN_BLOCK * ATTN_BLOCK : r->qlo;
}

/* The end of the queries that see some key below k_end (sliding window): query q sees key
 * j only when j > q + off - w. */
static int64_t window_query_end(const Bwd_Args *x, const Seq_Ranges *r, int64_t k_end)
{
	int64_t end = k_end - 1 - r->off + x->window;
	return x->window > 0 && end < r->qhi ? end : r->qhi;
}

/* dk, dv of keys [k0, k0 + nk) of kv head hk. */
static void dkdv_item(const Bwd_Args *x, DataflowDatatype dt, const Attn_Tiles *t, const Seq_Ranges *r, int64_t k0,
		      int nk, int64_t hk)
{
	const int d = (int)x->d, dp = (d + 15) / 16 * 16;
	const size_t es = dataflow_datatype_size(dt);
	const int64_t group = x->hq / x->hkv;
	float k[ATTN_BLOCK * ATTN_MAX_HEAD_DIM], v[ATTN_BLOCK * ATTN_MAX_HEAD_DIM];
	float dk[ATTN_BLOCK * ATTN_MAX_HEAD_DIM], dv[ATTN_BLOCK * ATTN_MAX_HEAD_DIM];
	float p[ATTN_BLOCK * ATTN_BLOCK], ds[ATTN_BLOCK * ATTN_BLOCK];
	Query_Tile qt;

	size_t row0 = (size_t)((k0 * x->hkv + hk) * d) * es;
	attn_load_rows(k, dp, (const char *)x->k + row0, x->hkv * d, dt, nk, nk, d);
	attn_load_rows(v, dp, (const char *)x->v + row0, x->hkv * d, dt, nk, nk, d);
	memset(dk, 0, sizeof(float) * nk * dp);
	memset(dv, 0, sizeof(float) * nk * dp);
	for (int64_t h = hk * group; h < (hk + 1) * group; h++) {
		int64_t qend = window_query_end(x, r, k0 + nk);
		for (int64_t q0 = first_query_block(x, r, k0); q0 < qend; q0 += ATTN_BLOCK) {
			int nq = (int)(r->qhi - q0 < ATTN_BLOCK ? r->qhi - q0 : ATTN_BLOCK);
			load_query_tile(&qt, x, dt, q0, nq, h);
			tile_p_ds(t, x, &qt, k, v, k0, nk, q0, r->off, p, ds);
			t->acc(dv, nk, dp, p, ATTN_BLOCK, 1, nq, qt.dout);
			t->acc(dk, nk, dp, ds, ATTN_BLOCK, 1, nq, qt.q);
		}
	}
	store_kv_grad(x, dt, x->dk, k0, nk, hk, dk, dp, x->scale);
	store_kv_grad(x, dt, x->dv, k0, nk, hk, dv, dp, 1.0f);
}

/* dq of queries [q0, q0 + nq) of head h. */
static void dq_item(const Bwd_Args *x, DataflowDatatype dt, const Attn_Tiles *t, const Seq_Ranges *r, int64_t q0,
		    int nq, int64_t h)
{
	const int d = (int)x->d, dp = (d + 15) / 16 * 16;
	const size_t es = dataflow_datatype_size(dt);
	const int64_t hk = h / (x->hq / x->hkv);
	float k[ATTN_BLOCK * ATTN_MAX_HEAD_DIM], v[ATTN_BLOCK * ATTN_MAX_HEAD_DIM], dq[ATTN_BLOCK * ATTN_MAX_HEAD_DIM];
	float p[ATTN_BLOCK * ATTN_BLOCK], ds[ATTN_BLOCK * ATTN_BLOCK];
	Query_Tile qt;

	load_query_tile(&qt, x, dt, q0, nq, h);
	memset(dq, 0, sizeof(float) * nq * dp);
	int64_t kend = x->causal ? q0 + nq + r->off : r->khi;
	for (int64_t kb = attn_window_key_start(r->klo, q0 + r->off, x->window); kb < kend; kb += ATTN_BLOCK) {
		int nk = (int)(kend - kb < ATTN_BLOCK ? kend - kb : ATTN_BLOCK);
		size_t row0 = (size_t)((kb * x->hkv + hk) * d) * es;
		attn_load_rows(k, dp, (const char *)x->k + row0, x->hkv * d, dt, nk, nk, d);
		attn_load_rows(v, dp, (const char *)x->v + row0, x->hkv * d, dt, nk, nk, d);
		tile_p_ds(t, x, &qt, k, v, kb, nk, q0, r->off, p, ds);
		t->acc(dq, nq, dp, ds, 1, ATTN_BLOCK, nk, k); /* dq_i += sum_j ds_ji k_j */
	}
	attn_store_rows((char *)x->dq + (size_t)((q0 * x->hq + h) * d) * es, x->hq * d, dt, dq, dp, nq, d, x->scale);
}

/* With enough (sequence, kv head) pairs to share out, one item per pair computes dk, dv of
 * every key and dq of every query of the group's heads, each tile's p and ds once (5 tile
 * products instead of 7). dq accumulates in fp32 rows dqs[group head][query][dp], per query
 * over key blocks in order, exactly as dq_item does: the two kinds of item give the same bits. */
static int bwd_fused(int64_t num_seqs, int64_t hkv)
{
	return num_seqs * hkv >= 4;
}

static void fused_item(const Bwd_Args *x, DataflowDatatype dt, const Attn_Tiles *t, const Seq_Ranges *r, int64_t hk)
{
	const int d = (int)x->d, dp = (d + 15) / 16 * 16;
	const size_t es = dataflow_datatype_size(dt);
	const int64_t group = x->hq / x->hkv, nq_all = r->qhi - r->qlo, nk_all = r->khi - r->klo;
	if (nq_all <= 0 && nk_all <= 0)
		return;
	/* fp32 rows of the sequence: dq of the group's heads, then k, v, dk, dv */
	size_t floats = (size_t)((group * nq_all + 4 * nk_all) * dp);
	float *dqs = malloc(sizeof(float) * floats);
	if (!dqs) { /* the two kinds of item, same bits */
		for (int64_t k0 = r->klo; k0 < r->khi; k0 += ATTN_BLOCK)
			dkdv_item(x, dt, t, r, k0, (int)(r->khi - k0 < ATTN_BLOCK ? r->khi - k0 : ATTN_BLOCK), hk);
		for (int64_t h = hk * group; h < (hk + 1) * group; h++)
			for (int64_t q0 = r->qlo; q0 < r->qhi; q0 += ATTN_BLOCK)
				dq_item(x, dt, t, r, q0, (int)(r->qhi - q0 < ATTN_BLOCK ? r->qhi - q0 : ATTN_BLOCK), h);
		return;
	}
	float *ks = dqs + group * nq_all * dp, *vs = ks + nk_all * dp, *dks = vs + nk_all * dp, *dvs = dks + nk_all * dp;
	memset(dqs, 0, sizeof(float) * floats);
	size_t kv0 = (size_t)((r->klo * x->hkv + hk) * d) * es;
	attn_load_rows(ks, dp, (const char *)x->k + kv0, x->hkv * d, dt, (int)nk_all, (int)nk_all, d);
	attn_load_rows(vs, dp, (const char *)x->v + kv0, x->hkv * d, dt, (int)nk_all, (int)nk_all, d);
	float p[ATTN_BLOCK * ATTN_BLOCK], ds[ATTN_BLOCK * ATTN_BLOCK];
	Query_Tile qt;
	/* for each key block the (head, query block) pairs come in dkdv_item's order, and for
	 * each query block the key blocks in dq_item's order; each query tile loads once */
	for (int64_t h = hk * group; h < (hk + 1) * group; h++) {
		float *dq = dqs + (h - hk * group) * nq_all * dp;
		for (int64_t q0 = r->qlo; q0 < r->qhi; q0 += ATTN_BLOCK) {
			int nq = (int)(r->qhi - q0 < ATTN_BLOCK ? r->qhi - q0 : ATTN_BLOCK);
			load_query_tile(&qt, x, dt, q0, nq, h);
			int64_t kend = x->causal ? q0 + nq + r->off : r->khi;
			for (int64_t k0 = attn_window_key_start(r->klo, q0 + r->off, x->window); k0 < kend;
			     k0 += ATTN_BLOCK) {
				int nk = (int)(kend - k0 < ATTN_BLOCK ? kend - k0 : ATTN_BLOCK);
				size_t kr = (size_t)((k0 - r->klo) * dp);
				tile_p_ds(t, x, &qt, ks + kr, vs + kr, k0, nk, q0, r->off, p, ds);
				t->acc(dvs + kr, nk, dp, p, ATTN_BLOCK, 1, nq, qt.dout);
				t->acc(dks + kr, nk, dp, ds, ATTN_BLOCK, 1, nq, qt.q);
				t->acc(dq + (size_t)((q0 - r->qlo) * dp), nq, dp, ds, 1, ATTN_BLOCK, nk,
				       ks + kr); /* dq_i += sum_j ds_ji k_j */
			}
		}
		attn_store_rows((char *)x->dq + (size_t)((r->qlo * x->hq + h) * d) * es, x->hq * d, dt, dq, dp,
				(int)nq_all, d, x->scale);
	}
	store_kv_grad(x, dt, x->dk, r->klo, (int)nk_all, hk, dks, dp, x->scale);
	store_kv_grad(x, dt, x->dv, r->klo, (int)nk_all, hk, dvs, dp, 1.0f);
	free(dqs);
}

/* Items: first every (key block, kv head), then every (query block, query head), blocks
 * numbered over all sequences (seq_cursor over the offsets of the side they cut, the other
 * side's cursor walked in step); or, fused, every (sequence, kv head). */
static void bwd(Bwd_Args x, int part, int num_parts, DataflowDatatype dt)
{
	Attn_Tiles t = attn_tiles();
	Seq_Cursor cq = seq_cursor(x.cu_q, x.num_seqs, x.total_q), ck = seq_cursor(x.cu_k, x.num_seqs, x.total_k);
	if (bwd_fused(x.num_seqs, x.hkv)) {
		int64_t begin, end;
		dataflow_part_range(x.num_seqs * x.hkv, part, num_parts, 1, &begin, &end);
		for (int64_t item = begin; item < end; item++) {
			seq_cursor_seek(&cq, item / x.hkv);
			seq_cursor_seek(&ck, item / x.hkv);
			if (cq.s >= x.num_seqs)
				break;
			Seq_Ranges r = seq_ranges(&cq, &ck);
			fused_item(&x, dt, &t, &r, item % x.hkv);
		}
		return;
	}
	int64_t kv_items = attn_max_blocks(x.total_k, x.num_seqs) * x.hkv, begin, end;
	dataflow_part_range(kv_items + attn_max_blocks(x.total_q, x.num_seqs) * x.hq, part, num_parts, 1, &begin, &end);
	int64_t item = begin;
	for (; item < end && item < kv_items; item++) {
		int64_t b = seq_cursor_find(&ck, item / x.hkv);
		if (b < 0) {
			item = kv_items;
			break;
		}
		seq_cursor_seek(&cq, ck.s);
		Seq_Ranges r = seq_ranges(&cq, &ck);
		int64_t k0 = ck.lo + b * ATTN_BLOCK;
		dkdv_item(&x, dt, &t, &r, k0, (int)(ck.hi - k0 < ATTN_BLOCK ? ck.hi - k0 : ATTN_BLOCK), item % x.hkv);
	}
	cq = seq_cursor(x.cu_q, x.num_seqs, x.total_q);
	ck = seq_cursor(x.cu_k, x.num_seqs, x.total_k);
	for (; item < end; item++) {
		int64_t b = seq_cursor_find(&cq, (item - kv_items) / x.hq);
		if (b < 0)
			break;
		seq_cursor_seek(&ck, cq.s);
		Seq_Ranges r = seq_ranges(&cq, &ck);
		int64_t q0 = cq.lo + b * ATTN_BLOCK;
		dq_item(&x, dt, &t, &r, q0, (int)(cq.hi - q0 < ATTN_BLOCK ? cq.hi - q0 : ATTN_BLOCK),
			(item - kv_items) % x.hq);
	}
}

static void attention_bwd(void **args, int part, int num_parts, DataflowDatatype dt)
{
	bwd(bwd_args(args), part, num_parts, dt);
}

static void attention_kv_bwd(void **args, int part, int num_parts, DataflowDatatype dt)
{
	bwd(kv_bwd_args(args), part, num_parts, dt);
}

DATAFLOW_HOST_FLOAT_KERNELS(attention_bwd, attention_bwd, DATAFLOW_FP32, DATAFLOW_BF16, DATAFLOW_FP16)
DATAFLOW_HOST_FLOAT_KERNELS(attention_kv_bwd, attention_kv_bwd, DATAFLOW_FP32, DATAFLOW_BF16, DATAFLOW_FP16)

static int bwd_parts(Bwd_Args a)
{
	return attn_num_parts(bwd_fused(a.num_seqs, a.hkv) ? a.num_seqs * a.hkv
							  : attn_max_blocks(a.total_k, a.num_seqs) * a.hkv +
								    attn_max_blocks(a.total_q, a.num_seqs) * a.hq);
}

DATAFLOW_HOST_LAUNCH(dataflow_host_attention_bwd_launch, Bwd_Args, bwd_args, bwd_parts(a))
DATAFLOW_HOST_LAUNCH(dataflow_host_attention_kv_bwd_launch, Bwd_Args, kv_bwd_args, bwd_parts(a))

/* ---- attention_bwd_delta: D[h][t] = sum_k dout[t][h][k] * out[t][h][k] ----
 * A plain in-order sum (the same bits on every path); parts are ranges of (token, head) rows. */

static void delta(void **args, int part, int num_parts, DataflowDatatype dt)
{
	Dataflow_Attention_Bwd_Delta_Args x = dataflow_attention_bwd_delta_args(args);
	const void *dout = x.dout, *out = x.out;
	float *dlt = x.D;
	int64_t total = x.total_tokens, hq = x.num_q_heads;
	int d = (int)x.head_dim;
	size_t es = dataflow_datatype_size(dt);
	float a[ATTN_MAX_HEAD_DIM], b[ATTN_MAX_HEAD_DIM];
	int64_t begin, end;
	dataflow_part_range(total * hq, part, num_parts, 1, &begin, &end);
	for (int64_t r = begin; r < end; r++) {
		dataflow_convert(DATAFLOW_FP32, a, dt, (const char *)dout + (size_t)(r * d) * es, d);
		dataflow_convert(DATAFLOW_FP32, b, dt, (const char *)out + (size_t)(r * d) * es, d);
		float sum = 0.0f;
		for (int k = 0; k < d; k++)
			sum += a[k] * b[k];
		dlt[(r % hq) * total + r / hq] = sum;
	}
}

DATAFLOW_HOST_FLOAT_KERNELS(attention_bwd_delta, delta, DATAFLOW_FP32, DATAFLOW_BF16, DATAFLOW_FP16)

DATAFLOW_HOST_LAUNCH(dataflow_host_attention_bwd_delta_launch, Dataflow_Attention_Bwd_Delta_Args,
		     dataflow_attention_bwd_delta_args, dataflow_elementwise_parts(a.total_tokens * a.num_q_heads, 1024))
