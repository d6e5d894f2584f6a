/* A decoder layer block, as Hugging Face's LlamaDecoderLayer, Qwen2DecoderLayer and
 * Qwen3DecoderLayer compute it ([..]: when the config has it):
 *   xn1 = rms_norm(x) ; q, k, v = xn1 Wq^T [+ bq], xn1 Wk^T [+ bk], xn1 Wv^T [+ bv]
 *   [q, k = rms_norm(q), rms_norm(k) over each head's head_dim values (qk_norm)]
 *   q, k = rope(q), rope(k) ; att = causal varlen GQA attention(q, k, v), scale 1 / sqrt(head_dim)
 *                                   (times rope's attention factor squared: yarn's mscale on cos, sin)
 *                                   [over the last sliding_window keys only (Mistral)]
 *   hmid = x + att Wo^T [+ bo] ; xn2 = rms_norm(hmid) ; y = hmid + (silu(xn2 Wg^T) * xn2 Wu^T) Wd^T
 *                                   [or y = hmid + the mixture of experts (llama_moe.c)]
 * A bias is a matmul with a column of ones (ones[T, 1] b[1, n], exact), written before the
 * projection, which then accumulates onto it (one rounding, as torch's addmm); its gradient
 * is the column sum of the output gradient (dy^T ones). The per-head norms' backward runs
 * between rope_bwd and the projections' input gradients.
 * The backward is split: backward_x (dy -> dx, keeping in dacts what the weight gradients
 * need) and backward_w (weight gradients, fp32, accumulated with matmul beta = 1):
 *   backward_x: dgate = dy Wd ; dgate, dup = swiglu_bwd(dgate) ; dxn2 = dgate Wg + dup Wu
 *               dmid = dy + rms_norm_bwd_x(dxn2, hmid) ; datt = dmid Wo
 *               dq, dk, dv = attention_bwd(datt) ; dq, dk = rope_bwd(dq, dk)
 *               dxn1 = dq Wq + dk Wk + dv Wv ; dx = dmid + rms_norm_bwd_x(dxn1, x)
 *   backward_w: gWd += dy^T swiglu(gate, up) ; gWg += dgate^T xn2 ; gWu += dup^T xn2
 *               gln2 += rms_norm_bwd_w(dxn2, hmid) ; gWo += dmid^T att
 *               gWq, gWk, gWv += dq^T xn1, dk^T xn1, dv^T xn1 ; gln1 += rms_norm_bwd_w(dxn1, x)
 * Activation gradients are in the model dtype.
 * With a K/V context (chunks of a long sequence), the forward writes the chunk's k, v into the
 * context and attends over it (attention_kv); backward_x adds the chunk's attention gradients
 * into the context's fp32 dk, dv (attention_kv_bwd) and takes the chunk's own rows from there:
 * complete once the chunks after it have run their backward (the caller goes in reverse). */
#include <math.h>

#include "blocked_internal.h"

static Layer_View layer_view(const Dataflow_Blocked_Model *m, const Dataflow_Block_Memory *mem, const Dataflow_Block_Args *a)
{
	const Dataflow_Llama_Config *c = &m->config;
	Layer_View L = {.m = m, .h = m->handle, .d = c->dtype, .T = a->batch->num_tokens, .H = c->hidden_size,
		   .F = c->intermediate_size, .hd = c->head_dim, .nq = c->num_heads, .nkv = c->num_kv_heads};
	for (int i = 0; i < LLAMA_PER_LAYER; i++) {
		int present = m->layer_size[i] > 0; /* optional tensors the config lacks stay NULL */
		L.w[i] = mem->param && present ? llama_at(mem->param, m->layer_offset[i], L.d) : NULL;
		L.g[i] = mem->grad && present ? mem->grad + m->layer_offset[i] : NULL;
	}
	llama_acts_layout(m, DATAFLOW_BLOCK_LAYER, a->level, L.T, a->saved, a->recomputed, L.act, NULL, NULL);
	llama_dacts_layout(m, DATAFLOW_BLOCK_LAYER, L.T, a->dacts, L.da);
	llama_workspace_layout(m, L.T, a->workspace, L.ws);
	return L;
}

/* The ones column the bias matmuls read (workspace is scratch: every call that needs it fills it). */
static Dataflow_Status fill_ones(const Layer_View *L, int s)
{
	if (!L->w[LLAMA_QB] && !L->w[LLAMA_OB])
		return DATAFLOW_OK;
	return dataflow_submit_set_mem(L->h, s, L->d, L->T, 1.0f, L->ws[WS_ONES]);
}

/* out[T, n_out] = x W^T (+ residual) for layer weight w: the plain matmul, or for a quantized
 * weight (config.quant_bits) the dequantize-matmul over its codes, scales and zeros */
static Dataflow_Status layer_linear(const Layer_View *L, int s, const void *x, int w, const void *residual, void *out,
				    int64_t n_out, int64_t n_in)
{
	if (llama_is_quantized(&L->m->config, w))
		return llama_quantized_linear(L->m, s, x, L->w[w], residual, out, L->T, n_out, n_in);
	return llama_linear(L->m, s, x, L->w[w], residual, out, L->T, n_out, n_in);
}

/* out[T, n] = xn1 W^T (+ b when the layer has that bias) */
static Dataflow_Status projection(const Layer_View *L, int s, const void *xn1, int w, int b, void *out, int64_t n)
{
	if (!L->w[b])
		return layer_linear(L, s, xn1, w, NULL, out, n, L->H);
	TRY(llama_bias_rows(L->m, s, L->ws[WS_ONES], L->w[b], NULL, out, L->T, n));
	return layer_linear(L, s, xn1, w, out, out, n, L->H);
}

Dataflow_Status llama_layer_forward(const Dataflow_Blocked_Model *m, int s, const Dataflow_Block_Memory *mem,
				    const Dataflow_Block_Args *a, int recompute)
{
	Layer_View L = layer_view(m, mem, a);
	const Dataflow_Llama_Batch *b = a->batch;
	const Dataflow_Block_KV *kv = a->kv;
	float eps = m->config.rms_eps, scale = m->attn_scale;
	void **act = L.act;
	/* with a context, the chunk's K and V rows go straight into it at row kv->past */
	void *k = kv ? llama_at(kv->k, kv->past * L.nkv * L.hd, L.d) : act[ACT_K];
	void *v = kv ? llama_at(kv->v, kv->past * L.nkv * L.hd, L.d) : act[ACT_V];
	/* with per-head norms the projections' outputs are kept apart (their backward reads them) */
	void *q_lin = L.w[LLAMA_QN] ? act[ACT_QPRE] : act[ACT_Q];
	void *k_lin = L.w[LLAMA_KN] ? act[ACT_KPRE] : k;

	TRY(fill_ones(&L, s));
	TRY(dataflow_submit_rms_norm(L.h, s, L.d, L.T, L.H, eps, a->x, L.w[LLAMA_LN1], act[ACT_XN1], act[ACT_RSTD1]));
	TRY(projection(&L, s, act[ACT_XN1], LLAMA_Q, LLAMA_QB, q_lin, L.nq * L.hd));
	TRY(projection(&L, s, act[ACT_XN1], LLAMA_K, LLAMA_KB, k_lin, L.nkv * L.hd));
	TRY(projection(&L, s, act[ACT_XN1], LLAMA_V, LLAMA_VB, v, L.nkv * L.hd));
	if (L.w[LLAMA_QN]) {
		TRY(dataflow_submit_rms_norm(L.h, s, L.d, L.T * L.nq, L.hd, eps, q_lin, L.w[LLAMA_QN], act[ACT_Q],
					     act[ACT_RSTDQ]));
		TRY(dataflow_submit_rms_norm(L.h, s, L.d, L.T * L.nkv, L.hd, eps, k_lin, L.w[LLAMA_KN], k,
					     act[ACT_RSTDK]));
	}
	TRY(dataflow_submit_rope(L.h, s, L.d, L.T, L.nq, L.hd, b->positions, m->inv_freq, act[ACT_Q], act[ACT_Q]));
	TRY(dataflow_submit_rope(L.h, s, L.d, L.T, L.nkv, L.hd, b->positions, m->inv_freq, k, k));
	const Dataflow_Block_Paged_KV *pkv = a->paged;
	if (pkv) {
		TRY(dataflow_submit_paged_kv_write(L.h, s, L.d, k, v, pkv->slot_mapping, pkv->k_pages, pkv->v_pages, L.T,
						   pkv->num_pages, pkv->page_size, L.nkv, L.hd));
		TRY(dataflow_submit_paged_attention(L.h, s, L.d, act[ACT_Q], pkv->k_pages, pkv->v_pages, pkv->page_table,
						    pkv->seq_lens, b->cu_seqlens, act[ACT_ATT], NULL, pkv->workspace,
						    pkv->workspace_bytes, L.T, b->num_docs, pkv->num_pages,
						    pkv->page_size, pkv->max_pages, L.nq, L.nkv, L.hd, pkv->split_size,
						    scale));
	} else if (kv && (!recompute || a->level < DATAFLOW_SAVE_ATTENTION))
		TRY(dataflow_submit_attention_kv(L.h, s, L.d, act[ACT_Q], kv->k, kv->v, b->cu_seqlens, kv->cu_k,
						 act[ACT_ATT], act[ACT_LSE], L.T, kv->past + L.T, 1, L.nq, L.nkv, L.hd,
						 scale, 1, m->config.sliding_window));
	else if (!kv && (!recompute || a->level < DATAFLOW_SAVE_ATTENTION))
		TRY(dataflow_submit_attention(L.h, s, L.d, act[ACT_Q], k, v, b->cu_seqlens, act[ACT_ATT], act[ACT_LSE],
					      L.T, b->num_docs, L.nq, L.nkv, L.hd, scale, 1, m->config.sliding_window));
	const void *residual = a->x;
	if (L.w[LLAMA_OB]) { /* hmid = (x + bo) + att Wo^T */
		TRY(llama_bias_rows(m, s, L.ws[WS_ONES], L.w[LLAMA_OB], a->x, act[ACT_HMID], L.T, L.H));
		residual = act[ACT_HMID];
	}
	TRY(layer_linear(&L, s, act[ACT_ATT], LLAMA_O, residual, act[ACT_HMID], L.H, L.nq * L.hd));
	TRY(dataflow_submit_rms_norm(L.h, s, L.d, L.T, L.H, eps, act[ACT_HMID], L.w[LLAMA_LN2], act[ACT_XN2],
				     act[ACT_RSTD2]));
	if (m->config.num_experts)
		return llama_moe_forward(&L, s, a, recompute);
	TRY(layer_linear(&L, s, act[ACT_XN2], LLAMA_GATE, NULL, act[ACT_GATE], L.F, L.H));
	TRY(layer_linear(&L, s, act[ACT_XN2], LLAMA_UP, NULL, act[ACT_UP], L.F, L.H));
	if (recompute) /* the backward needs neither swiglu's output (rebuilt by backward_w) nor y */
		return DATAFLOW_OK;
	TRY(dataflow_submit_swiglu(L.h, s, L.d, L.T, L.F, act[ACT_GATE], act[ACT_UP], L.ws[WS_ACT]));
	return layer_linear(&L, s, L.ws[WS_ACT], LLAMA_DOWN, act[ACT_HMID], a->y, L.H, L.F);
}

/* out = add + rms_norm_bwd_x(dxn, x) */
static Dataflow_Status norm_input_grad(const Layer_View *L, int s, const void *dxn, const void *x, const void *w,
				       const void *rstd, const void *add, void *out)
{
	TRY(dataflow_submit_rms_norm_bwd_x(L->h, s, L->d, L->T, L->H, dxn, x, w, rstd, L->ws[WS_DTMP]));
	return dataflow_submit_add(L->h, s, L->d, L->T * L->H, 1.0f, add, 1.0f, L->ws[WS_DTMP], out);
}

/* The chunk's rows of a context gradient (fp32 [T, nkv * hd]) in the model dtype. */
static Dataflow_Status context_rows(const Layer_View *L, int s, const float *rows, void *out)
{
	int64_t n = L->T * L->nkv * L->hd;
	if (L->d == DATAFLOW_FP32) /* a copy: 1 * x is exact */
		return dataflow_submit_scale(L->h, s, DATAFLOW_FP32, n, 1.0f, rows, out);
	return dataflow_submit_cast(L->h, s, DATAFLOW_FP32, L->d, n, rows, out);
}

/* dq, dk, dv of the chunk's attention from datt. */
static Dataflow_Status attention_grads(const Layer_View *L, int s, const Dataflow_Block_Args *a)
{
	const Dataflow_Llama_Batch *b = a->batch;
	const Dataflow_Block_KV *kv = a->kv;
	void *const *act = L->act, *const *da = L->da;
	float scale = L->m->attn_scale;
	int64_t ws = dataflow_attention_bwd_workspace_bytes(L->T, L->T, L->nq, L->nkv, L->hd);
	if (!kv)
		return dataflow_submit_attention_bwd(L->h, s, L->d, L->ws[WS_DATT], act[ACT_Q], act[ACT_K], act[ACT_V],
						     act[ACT_ATT], act[ACT_LSE], b->cu_seqlens, da[DA_DQ], da[DA_DK],
						     da[DA_DV], L->ws[WS_ATTN], ws, L->T, b->num_docs, L->nq, L->nkv,
						     L->hd, scale, 1, L->m->config.sliding_window);
	int64_t row = kv->past * L->nkv * L->hd;
	TRY(dataflow_submit_attention_kv_bwd(L->h, s, L->d, L->ws[WS_DATT], act[ACT_Q], kv->k, kv->v, act[ACT_ATT],
					     act[ACT_LSE], b->cu_seqlens, kv->cu_k, da[DA_DQ], kv->dk, kv->dv,
					     L->ws[WS_ATTN], ws, L->T, kv->past + L->T, 1, L->nq, L->nkv, L->hd, scale,
					     1, L->m->config.sliding_window));
	TRY(context_rows(L, s, kv->dk + row, da[DA_DK]));
	return context_rows(L, s, kv->dv + row, da[DA_DV]);
}

Dataflow_Status llama_layer_backward_x(const Dataflow_Blocked_Model *m, int s, const Dataflow_Block_Memory *mem,
				       const Dataflow_Block_Args *a)
{
	TRY(llama_refuse_quantized(&m->config, "layer backward_x"));
	Layer_View L = layer_view(m, mem, a);
	const Dataflow_Llama_Batch *b = a->batch;
	void **act = L.act, **da = L.da;
	int64_t qd = L.nq * L.hd, kvd = L.nkv * L.hd;

	/* MLP */
	if (m->config.num_experts) {
		TRY(llama_moe_backward_x(&L, s, a));
	} else {
		TRY(llama_input_grad(m, s, a->dy, L.w[LLAMA_DOWN], da[DA_DGATE], L.T, L.H, L.F, 0));
		TRY(dataflow_submit_swiglu_bwd(L.h, s, L.d, L.T, L.F, da[DA_DGATE], act[ACT_GATE], act[ACT_UP],
					       da[DA_DGATE], da[DA_DUP]));
		TRY(llama_input_grad(m, s, da[DA_DGATE], L.w[LLAMA_GATE], da[DA_DXN2], L.T, L.F, L.H, 0));
		TRY(llama_input_grad(m, s, da[DA_DUP], L.w[LLAMA_UP], da[DA_DXN2], L.T, L.F, L.H, 1));
	}
	TRY(norm_input_grad(&L, s, da[DA_DXN2], act[ACT_HMID], L.w[LLAMA_LN2], act[ACT_RSTD2], a->dy, da[DA_DMID]));

	/* attention */
	TRY(llama_input_grad(m, s, da[DA_DMID], L.w[LLAMA_O], L.ws[WS_DATT], L.T, L.H, qd, 0));
	TRY(attention_grads(&L, s, a));
	void *dq_n = L.w[LLAMA_QN] ? da[DA_DQN] : da[DA_DQ]; /* gradients at the rope's inputs */
	void *dk_n = L.w[LLAMA_KN] ? da[DA_DKN] : da[DA_DK];
	TRY(dataflow_submit_rope_bwd(L.h, s, L.d, L.T, L.nq, L.hd, b->positions, m->inv_freq, da[DA_DQ], dq_n));
	TRY(dataflow_submit_rope_bwd(L.h, s, L.d, L.T, L.nkv, L.hd, b->positions, m->inv_freq, da[DA_DK], dk_n));
	if (L.w[LLAMA_QN]) {
		TRY(dataflow_submit_rms_norm_bwd_x(L.h, s, L.d, L.T * L.nq, L.hd, dq_n, act[ACT_QPRE], L.w[LLAMA_QN],
						   act[ACT_RSTDQ], da[DA_DQ]));
		TRY(dataflow_submit_rms_norm_bwd_x(L.h, s, L.d, L.T * L.nkv, L.hd, dk_n, act[ACT_KPRE], L.w[LLAMA_KN],
						   act[ACT_RSTDK], da[DA_DK]));
	}
	TRY(llama_input_grad(m, s, da[DA_DQ], L.w[LLAMA_Q], da[DA_DXN1], L.T, qd, L.H, 0));
	TRY(llama_input_grad(m, s, da[DA_DK], L.w[LLAMA_K], da[DA_DXN1], L.T, kvd, L.H, 1));
	TRY(llama_input_grad(m, s, da[DA_DV], L.w[LLAMA_V], da[DA_DXN1], L.T, kvd, L.H, 1));
	return norm_input_grad(&L, s, da[DA_DXN1], a->x, L.w[LLAMA_LN1], act[ACT_RSTD1], da[DA_DMID], a->dx);
}

Dataflow_Status llama_layer_backward_w(const Dataflow_Blocked_Model *m, int s, const Dataflow_Block_Memory *mem,
				       const Dataflow_Block_Args *a)
{
	TRY(llama_refuse_quantized(&m->config, "layer backward_w"));
	Layer_View L = layer_view(m, mem, a);
	void **act = L.act, **da = L.da;
	int64_t qd = L.nq * L.hd, kvd = L.nkv * L.hd;

	if (m->config.num_experts) {
		TRY(llama_moe_backward_w(&L, s));
	} else {
		TRY(dataflow_submit_swiglu(L.h, s, L.d, L.T, L.F, act[ACT_GATE], act[ACT_UP], L.ws[WS_ACT]));
		TRY(llama_weight_grad(m, s, a->dy, L.ws[WS_ACT], L.g[LLAMA_DOWN], L.T, L.H, L.F));
		TRY(llama_weight_grad(m, s, da[DA_DGATE], act[ACT_XN2], L.g[LLAMA_GATE], L.T, L.F, L.H));
		TRY(llama_weight_grad(m, s, da[DA_DUP], act[ACT_XN2], L.g[LLAMA_UP], L.T, L.F, L.H));
	}
	TRY(llama_norm_weight_grad(m, s, L.T, L.H, da[DA_DXN2], act[ACT_HMID], act[ACT_RSTD2], L.g[LLAMA_LN2], L.ws));
	TRY(llama_weight_grad(m, s, da[DA_DMID], act[ACT_ATT], L.g[LLAMA_O], L.T, L.H, qd));
	TRY(llama_weight_grad(m, s, da[DA_DQ], act[ACT_XN1], L.g[LLAMA_Q], L.T, qd, L.H));
	TRY(llama_weight_grad(m, s, da[DA_DK], act[ACT_XN1], L.g[LLAMA_K], L.T, kvd, L.H));
	TRY(llama_weight_grad(m, s, da[DA_DV], act[ACT_XN1], L.g[LLAMA_V], L.T, kvd, L.H));
	TRY(fill_ones(&L, s));
	const int bias[][2] = {{LLAMA_OB, DA_DMID}, {LLAMA_QB, DA_DQ}, {LLAMA_KB, DA_DK}, {LLAMA_VB, DA_DV}};
	const int64_t bias_n[] = {L.H, qd, kvd, kvd};
	for (int i = 0; i < 4; i++)
		if (L.g[bias[i][0]])
			TRY(llama_weight_grad(m, s, da[bias[i][1]], L.ws[WS_ONES], L.g[bias[i][0]], L.T, bias_n[i], 1));
	if (L.g[LLAMA_QN]) {
		TRY(llama_norm_weight_grad(m, s, L.T * L.nq, L.hd, da[DA_DQN], act[ACT_QPRE], act[ACT_RSTDQ],
					   L.g[LLAMA_QN], L.ws));
		TRY(llama_norm_weight_grad(m, s, L.T * L.nkv, L.hd, da[DA_DKN], act[ACT_KPRE], act[ACT_RSTDK],
					   L.g[LLAMA_KN], L.ws));
	}
	return llama_norm_weight_grad(m, s, L.T, L.H, da[DA_DXN1], a->x, act[ACT_RSTD1], L.g[LLAMA_LN1], L.ws);
}
