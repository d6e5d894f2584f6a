/* A layer's mixture-of-experts feed-forward, as Hugging Face's MixtralSparseMoeBlock and
 * Qwen3MoeSparseMoeBlock compute it (xn2: the post-attention norm's output, T tokens, E experts,
 * top-k, I = moe_intermediate_size):
 *   logits = xn2 Wr^T (fp32; a bf16 model rounds them to bf16 first, as HF's linear does)
 *   probs, w, ids = moe_router(logits)          softmax, torch.topk's choice, [renormalized]
 *   xp = moe_permute(xn2, ids)                  the T * k routed rows, expert by expert
 *   g, u = xp Wg[e]^T, xp Wu[e]^T               one grouped matmul each (expert e's rows)
 *   yp = (silu(g) * u) Wd[e]^T
 *   y = hmid + moe_combine(yp, w)               each token's k rows, weighted, summed in order
 * The backward runs it in reverse: moe_combine_bwd (d yp, d w), the grouped matmuls' input
 * gradients, swiglu_bwd, d xn2 = combine(d xp) (the permutation's backward) + d logits Wr with
 * d logits = moe_router_bwd(d w); backward_w: the grouped weight gradients and d logits^T xn2.
 * Training with HF's load-balancing loss (args->router): the forward adds the routing to the
 * pass's statistics, backward_x adds the loss's share to d logits before both their matmuls.
 * Every array is laid out by block_layout.c (ACT_RLOGITS .. ACT_YPERM, DA_DXPERM .. DA_DTOPW). */
#include "blocked_internal.h"

/* The router logits' gradient (fp32) in the model dtype, for its matmuls: the fp32 array
 * itself, or (bf16) a bf16 copy in the workspace. */
static Dataflow_Status router_rows(const Layer_View *L, int s, const float *fp32, const void **out)
{
	int64_t n = L->T * L->m->config.num_experts;
	*out = fp32;
	if (L->d == DATAFLOW_FP32)
		return DATAFLOW_OK;
	*out = L->ws[WS_ROUTER];
	return dataflow_submit_cast(L->h, s, DATAFLOW_FP32, L->d, n, fp32, L->ws[WS_ROUTER]);
}

Dataflow_Status llama_moe_forward(const Layer_View *L, int s, const Dataflow_Block_Args *a, int recompute)
{
	const Dataflow_Llama_Config *c = &L->m->config;
	int64_t E = c->num_experts, k = c->num_experts_per_tok, I = c->moe_intermediate_size, rows = L->T * k;
	void *const *act = L->act;
	if (L->d == DATAFLOW_FP32) {
		TRY(llama_linear(L->m, s, act[ACT_XN2], L->w[LLAMA_ROUTER], NULL, act[ACT_RLOGITS], L->T, E, L->H));
	} else {
		TRY(llama_linear(L->m, s, act[ACT_XN2], L->w[LLAMA_ROUTER], NULL, L->ws[WS_ROUTER], L->T, E, L->H));
		TRY(dataflow_submit_cast(L->h, s, L->d, DATAFLOW_FP32, L->T * E, L->ws[WS_ROUTER], act[ACT_RLOGITS]));
	}
	TRY(dataflow_submit_moe_router(L->h, s, DATAFLOW_FP32, L->T, E, k, c->norm_topk_prob, act[ACT_RLOGITS],
				       act[ACT_PROBS], act[ACT_TOPW], act[ACT_TOPI]));
	if (a->router && !recompute) /* a recompute would count the chunk twice */
		TRY(dataflow_submit_moe_router_stats(L->h, s, DATAFLOW_FP32, L->T, E, k, act[ACT_PROBS], act[ACT_TOPI],
						     a->router->stats));
	TRY(dataflow_submit_moe_permute(L->h, s, L->d, L->T, E, k, L->H, act[ACT_TOPI], act[ACT_XN2], act[ACT_OFFSETS],
					act[ACT_ROWS], act[ACT_SLOTS], act[ACT_XPERM]));
	TRY(dataflow_submit_moe_grouped_matmul(L->h, s, L->d, rows, E, I, L->H, 1, act[ACT_XPERM], L->w[LLAMA_EGATE],
					       act[ACT_OFFSETS], act[ACT_GATE]));
	TRY(dataflow_submit_moe_grouped_matmul(L->h, s, L->d, rows, E, I, L->H, 1, act[ACT_XPERM], L->w[LLAMA_EUP],
					       act[ACT_OFFSETS], act[ACT_UP]));
	/* the experts' outputs are an activation too: the top-k weights' gradient reads them */
	TRY(dataflow_submit_swiglu(L->h, s, L->d, rows, I, act[ACT_GATE], act[ACT_UP], L->ws[WS_ACT]));
	TRY(dataflow_submit_moe_grouped_matmul(L->h, s, L->d, rows, E, L->H, I, 1, L->ws[WS_ACT], L->w[LLAMA_EDOWN],
					       act[ACT_OFFSETS], act[ACT_YPERM]));
	if (recompute)
		return DATAFLOW_OK;
	TRY(dataflow_submit_moe_combine(L->h, s, L->d, L->T, k, L->H, act[ACT_YPERM], act[ACT_SLOTS], act[ACT_TOPW],
					L->ws[WS_DTMP]));
	return dataflow_submit_add(L->h, s, L->d, L->T * L->H, 1.0f, act[ACT_HMID], 1.0f, L->ws[WS_DTMP], a->y);
}

Dataflow_Status llama_moe_backward_x(const Layer_View *L, int s, const Dataflow_Block_Args *a)
{
	const Dataflow_Llama_Config *c = &L->m->config;
	const void *dy = a->dy;
	int64_t E = c->num_experts, k = c->num_experts_per_tok, I = c->moe_intermediate_size, rows = L->T * k;
	void *const *act = L->act, *const *da = L->da;
	TRY(dataflow_submit_moe_combine_bwd(L->h, s, L->d, L->T, k, L->H, dy, act[ACT_YPERM], act[ACT_SLOTS],
					    act[ACT_TOPW], da[DA_DYPERM], da[DA_DTOPW]));
	/* d act = d yp Wd[e] (Wd[e] stored [H, I]: the k_in x n_out layout of the untransposed call) */
	TRY(dataflow_submit_moe_grouped_matmul(L->h, s, L->d, rows, E, I, L->H, 0, da[DA_DYPERM], L->w[LLAMA_EDOWN],
					       act[ACT_OFFSETS], da[DA_DGATE]));
	TRY(dataflow_submit_swiglu_bwd(L->h, s, L->d, rows, I, da[DA_DGATE], act[ACT_GATE], act[ACT_UP], da[DA_DGATE],
				       da[DA_DUP]));
	TRY(dataflow_submit_moe_grouped_matmul(L->h, s, L->d, rows, E, L->H, I, 0, da[DA_DGATE], L->w[LLAMA_EGATE],
					       act[ACT_OFFSETS], da[DA_DXPERM]));
	TRY(dataflow_submit_moe_grouped_matmul(L->h, s, L->d, rows, E, L->H, I, 0, da[DA_DUP], L->w[LLAMA_EUP],
					       act[ACT_OFFSETS], L->ws[WS_EXPERT_TMP]));
	TRY(dataflow_submit_add(L->h, s, L->d, rows * L->H, 1.0f, da[DA_DXPERM], 1.0f, L->ws[WS_EXPERT_TMP],
				da[DA_DXPERM]));
	/* the permutation's backward: each token's k rows summed (moe_combine with weights 1) */
	TRY(dataflow_submit_moe_combine(L->h, s, L->d, L->T, k, L->H, da[DA_DXPERM], act[ACT_SLOTS], NULL,
					da[DA_DXN2]));
	TRY(dataflow_submit_moe_router_bwd(L->h, s, DATAFLOW_FP32, L->T, E, k, c->norm_topk_prob, act[ACT_PROBS],
					   act[ACT_TOPI], da[DA_DTOPW], da[DA_DLOGITS]));
	if (a->router)
		TRY(dataflow_submit_moe_aux_loss_bwd(L->h, s, DATAFLOW_FP32, L->T, E, a->router->tokens * c->num_layers,
						     a->router->d_loss, a->router->stats, act[ACT_PROBS], da[DA_DLOGITS]));
	const void *dlogits;
	TRY(router_rows(L, s, da[DA_DLOGITS], &dlogits));
	return llama_input_grad(L->m, s, dlogits, L->w[LLAMA_ROUTER], da[DA_DXN2], L->T, E, L->H, 1);
}

Dataflow_Status llama_moe_backward_w(const Layer_View *L, int s)
{
	const Dataflow_Llama_Config *c = &L->m->config;
	int64_t E = c->num_experts, k = c->num_experts_per_tok, I = c->moe_intermediate_size, rows = L->T * k;
	void *const *act = L->act, *const *da = L->da;
	TRY(dataflow_submit_swiglu(L->h, s, L->d, rows, I, act[ACT_GATE], act[ACT_UP], L->ws[WS_ACT]));
	TRY(dataflow_submit_moe_grouped_matmul_bwd_w(L->h, s, L->d, DATAFLOW_FP32, rows, E, L->H, I, da[DA_DYPERM],
						     L->ws[WS_ACT], act[ACT_OFFSETS], L->g[LLAMA_EDOWN]));
	TRY(dataflow_submit_moe_grouped_matmul_bwd_w(L->h, s, L->d, DATAFLOW_FP32, rows, E, I, L->H, da[DA_DGATE],
						     act[ACT_XPERM], act[ACT_OFFSETS], L->g[LLAMA_EGATE]));
	TRY(dataflow_submit_moe_grouped_matmul_bwd_w(L->h, s, L->d, DATAFLOW_FP32, rows, E, I, L->H, da[DA_DUP],
						     act[ACT_XPERM], act[ACT_OFFSETS], L->g[LLAMA_EUP]));
	const void *dlogits;
	TRY(router_rows(L, s, da[DA_DLOGITS], &dlogits));
	return llama_weight_grad(L->m, s, dlogits, act[ACT_XN2], L->g[LLAMA_ROUTER], L->T, E, L->H);
}

Dataflow_Status dataflow_blocked_model_router_loss(const Dataflow_Blocked_Model *m, int stream,
						   const Dataflow_Block_Router_Loss *router, float *loss)
{
	if (!m || !router || !router->stats || !loss)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "blocked model router loss: model, router, router->stats and loss are required");
	if (m->config.num_experts == 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "blocked model router loss: the model has no experts (num_experts 0)");
	return dataflow_submit_moe_aux_loss(m->handle, stream, DATAFLOW_FP32, m->config.num_experts,
					    router->tokens * m->config.num_layers, router->stats, loss);
}
