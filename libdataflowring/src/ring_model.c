/* The planner's view of a blocked Llama: sizes from the blocked-model interface, compute per
 * token from the architecture. */
#include "dataflow/ring_model.h"

Dataflow_Status dataflow_ring_model_from_blocked(const Dataflow_Blocked_Model *model, Dataflow_Ring_Block *blocks,
						 int capacity, Dataflow_Ring_Model *out)
{
	if (!model || !blocks || !out)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring model: model, blocks and out are required");
	int n = dataflow_blocked_model_num_blocks(model);
	if (capacity < n)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring model: capacity must be >= the model's %d blocks, got %d", n, capacity);
	const Dataflow_Llama_Config *c = dataflow_blocked_model_config(model);
	double es = c->dtype == DATAFLOW_BF16 ? 2 : 4, H = (double)c->hidden_size, F = (double)c->intermediate_size;
	double qd = (double)(c->num_heads * c->head_dim), kvd = (double)(c->num_kv_heads * c->head_dim);
	/* the feed-forward weights a token meets: the dense SwiGLU, or the router and its top-k
	 * experts (even routing: flops per token do not depend on which experts) */
	double E = (double)c->num_experts, ffn = E ? E * H + (double)c->num_experts_per_tok * 3 * H *
						       (double)c->moe_intermediate_size
						   : 3 * F * H;
	for (int b = 0; b < n; b++) {
		Dataflow_Ring_Block *r = &blocks[b];
		Dataflow_Status st = dataflow_blocked_model_block_sizes(model, b, &r->sizes);
		if (st != DATAFLOW_OK)
			return st;
		double acts = (double)(r->sizes.saved_bytes_per_token[DATAFLOW_SAVE_ALL] +
				       r->sizes.recomputed_bytes_per_token[DATAFLOW_SAVE_ALL]);
		r->matmul_flops_per_token = 0;
		r->attention_flops_per_pair = 0;
		r->kv_bytes_per_token = 0;
		r->attention_window = 0;
		switch (r->sizes.role) {
		case DATAFLOW_BLOCK_EMBEDDING: /* a row gather: read the row, write y */
			r->memory_bytes_per_token = 2 * H * es;
			break;
		case DATAFLOW_BLOCK_LAYER: /* every activation written once and read once; x, residual, y */
			r->matmul_flops_per_token = 2 * (2 * qd * H + 2 * kvd * H + ffn);
			r->attention_flops_per_pair = 4 * qd;
			r->memory_bytes_per_token = 2 * acts + 3 * H * es;
			r->kv_bytes_per_token = (int64_t)(2 * kvd * es);
			r->attention_window = c->sliding_window;
			break;
		case DATAFLOW_BLOCK_HEAD: /* logits written, read by the loss, rewritten as dlogits */
			r->matmul_flops_per_token = 2 * (double)c->vocab_size * H;
			r->memory_bytes_per_token = 3 * acts + H * es;
			break;
		}
	}
	/* The workspace is a sum of 64-byte-aligned arrays, each linear in T: the slope measured
	 * over 2^20 tokens and one alignment per array on top of T = 1 bound it from above. */
	int64_t one = dataflow_blocked_model_workspace_bytes(model, 1);
	int64_t big = dataflow_blocked_model_workspace_bytes(model, (int64_t)1 << 20);
	if (one < 0 || big < 0)
		return dataflow_set_error(DATAFLOW_ERR_INTERNAL, "ring model: workspace sizes unavailable");
	int64_t span = ((int64_t)1 << 20) - 1;
	out->num_blocks = n;
	out->blocks = blocks;
	out->hidden_bytes_per_token = (int64_t)(H * es);
	out->workspace_bytes_per_token = (big - one + span - 1) / span;
	out->workspace_fixed_bytes = one + 8 * 64;
	out->tied = c->tie_embeddings;
	out->num_experts = c->num_experts;
	out->experts_per_tok = c->num_experts_per_tok;
	out->expert_param_bytes = (uint64_t)(3 * H * (double)c->moe_intermediate_size * es) * (c->num_experts > 0);
	return DATAFLOW_OK;
}
