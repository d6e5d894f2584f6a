/* The Llama head block: final norm, logits and the cross-entropy loss, as Hugging Face
 * LlamaForCausalLM computes them:
 *   xnf = rms_norm(x) ; logits = xnf Wlm^T   (Wlm = embed_tokens.weight when tied)
 *   loss[t] = CE(logits[t], labels[t]) ; dlogits = loss_scale * (softmax - onehot), in place
 *   backward_x: dxn = dlogits Wlm ; dx = rms_norm_bwd_x(dxn, x)
 *   backward_w: gWlm += dlogits^T xnf ; gnorm += rms_norm_bwd_w(dxn, x) */
#include "blocked_internal.h"

typedef struct {
	const void *norm, *lm_head; /* weights */
	float *gnorm, *glm_head;    /* gradients */
	void *act[HEAD_ACTS];
	void *dxn;
	void *ws[WS_COUNT];
	int64_t T; /* tokens */
} Head;

static Head head_view(const Dataflow_Blocked_Model *m, const Dataflow_Block_Memory *mem, const Dataflow_Block_Args *a)
{
	DataflowDatatype d = m->config.dtype;
	int64_t T = a->batch->num_tokens;
	const Dataflow_Block_Memory *lm = m->config.tie_embeddings ? a->tied : mem;
	int64_t lm_offset = m->config.tie_embeddings ? 0 : m->lm_head_offset;
	Head hd = {.T = T};
	if (mem->param)
		hd.norm = llama_at(mem->param, m->norm_offset, d);
	if (lm->param)
		hd.lm_head = llama_at(lm->param, lm_offset, d);
	if (mem->grad)
		hd.gnorm = mem->grad + m->norm_offset;
	if (lm->grad)
		hd.glm_head = lm->grad + lm_offset;
	void *da[LAYER_DACTS];
	llama_acts_layout(m, DATAFLOW_BLOCK_HEAD, a->level, T, a->saved, a->recomputed, hd.act, NULL, NULL);
	llama_dacts_layout(m, DATAFLOW_BLOCK_HEAD, T, a->dacts, da);
	hd.dxn = da[HEAD_DXN];
	llama_workspace_layout(m, T, a->workspace, hd.ws);
	return hd;
}

Dataflow_Status llama_head_forward(const Dataflow_Blocked_Model *m, int s, const Dataflow_Block_Memory *mem,
				   const Dataflow_Block_Args *a)
{
	const Dataflow_Llama_Config *c = &m->config;
	Head hd = head_view(m, mem, a);
	int64_t T = hd.T;
	void *logits = a->y ? a->y : hd.act[HEAD_LOGITS];
	TRY(dataflow_submit_rms_norm(m->handle, s, c->dtype, T, c->hidden_size, c->rms_eps, a->x, hd.norm,
				     hd.act[HEAD_XNF], hd.act[HEAD_RSTD]));
	if (c->quant_lm_head)
		TRY(llama_quantized_linear(m, s, hd.act[HEAD_XNF], hd.lm_head, NULL, logits, T, c->vocab_size,
					   c->hidden_size));
	else
		TRY(llama_linear(m, s, hd.act[HEAD_XNF], hd.lm_head, NULL, logits, T, c->vocab_size, c->hidden_size));
	if (!a->token_losses)
		return DATAFLOW_OK;
	return dataflow_submit_cross_entropy(m->handle, s, c->dtype, T, c->vocab_size, DATAFLOW_LLAMA_IGNORE_INDEX,
					     a->loss_scale, logits, a->batch->labels, a->token_losses, logits);
}

Dataflow_Status llama_head_backward_x(const Dataflow_Blocked_Model *m, int s, const Dataflow_Block_Memory *mem,
				      const Dataflow_Block_Args *a)
{
	const Dataflow_Llama_Config *c = &m->config;
	TRY(llama_refuse_quantized(c, "head backward_x"));
	Head hd = head_view(m, mem, a);
	TRY(llama_input_grad(m, s, hd.act[HEAD_LOGITS], hd.lm_head, hd.dxn, hd.T, c->vocab_size, c->hidden_size,
			     0));
	return dataflow_submit_rms_norm_bwd_x(m->handle, s, c->dtype, hd.T, c->hidden_size, hd.dxn, a->x, hd.norm,
					      hd.act[HEAD_RSTD], a->dx);
}

Dataflow_Status llama_head_backward_w(const Dataflow_Blocked_Model *m, int s, const Dataflow_Block_Memory *mem,
				      const Dataflow_Block_Args *a)
{
	const Dataflow_Llama_Config *c = &m->config;
	TRY(llama_refuse_quantized(c, "head backward_w"));
	Head hd = head_view(m, mem, a);
	TRY(llama_weight_grad(m, s, hd.act[HEAD_LOGITS], hd.act[HEAD_XNF], hd.glm_head, hd.T,
			      c->vocab_size, c->hidden_size));
	return llama_norm_weight_grad(m, s, hd.T, c->hidden_size, hd.dxn, a->x, hd.act[HEAD_RSTD], hd.gnorm, hd.ws);
}
