#ifndef DATAFLOWMODELS_LLAMA_INTERNAL_H
#define DATAFLOWMODELS_LLAMA_INTERNAL_H

/* Private to libdataflowmodels: the all-resident model, its activation workspace, the KV cache. */

#include "blocked_internal.h"
#include "dataflow/models.h"

/* The forward's activations for the largest batch so far, in one device allocation. */
typedef struct {
	int64_t tokens;            /* capacity in tokens; 0: not allocated */
	void *base;
	void *resid;               /* [(L + 1), T, H]: the input of every layer, then the final hidden */
	void *layer_acts;          /* one layer's other activations, rewritten by each layer */
	void *head_acts;
	float *token_losses;       /* [T] */
	void *scratch;             /* the per-call workspace */
} Llama_Workspace;

struct Dataflow_Llama {
	Dataflow_Handle *handle;
	Dataflow_Blocked_Model *bm;
	const Dataflow_Llama_Config *config; /* bm's */
	int num_blocks;
	Dataflow_Block_Memory *blocks;
	int64_t last_tokens; /* of the last loss: how many token losses are valid */
	Llama_Workspace ws;
	/* elements of each block's m, v and master in a layout of the caller's (ZeRO-1's shards,
	 * dataflow_llama_set_optimizer_state); NULL: the blocks' own */
	int64_t *state_numel;
};

static inline void *llama_resid(const Dataflow_Llama *m, int64_t layer)
{
	return llama_at(m->ws.resid, layer * m->ws.tokens * m->config->hidden_size, m->config->dtype);
}

/* Makes sure the workspace holds batches of `tokens` tokens. */
Dataflow_Status llama_workspace_reserve(Dataflow_Llama *model, int64_t tokens);
void llama_workspace_free(Dataflow_Llama *model);
Dataflow_Status llama_check_batch(const Dataflow_Llama *model, const Dataflow_Llama_Batch *batch, int need_labels);

/* The forward's block call arguments over the resident workspace for block b (x, y, saved,
 * recomputed, workspace). */
Dataflow_Block_Args llama_block_args(const Dataflow_Llama *model, const Dataflow_Llama_Batch *batch, int block);

struct Dataflow_Llama_KV_Cache {
	Dataflow_Llama *model;   /* compared, never dereferenced by destroy */
	Dataflow_Handle *handle;
	int64_t num_layers;
	int64_t max_tokens, length;
	void **layers;    /* per layer: K [max_tokens, kv_heads, head_dim] then V, one allocation */
	int32_t *tables;  /* device: iota [max_tokens], then pairs {0, m} for m = 0..max_tokens */
};

/* One step over the paged cache (llama_paged_cache.c): layer l's K pages start
 * 2 l layer_elems elements into the pool and its V pages layer_elems after them; the head runs
 * over each sequence's last new token, the rows last_rows gathered into head_x. */
typedef struct {
	Dataflow_Block_Paged_KV kv;  /* the tables and workspace; k_pages: the pool */
	int64_t layer_elems;         /* elements of one layer's K (or V) pages */
	const int32_t *last_rows;    /* device [num_docs] */
	void *head_x;                /* device [num_docs, hidden] */
} Llama_Paged_Pass;

/* Embedding, every layer (with the cache's K/V context when kv_cache is given, its length
 * tokens before the batch; or over paged pages when paged is given), then the head over rows
 * [first_row, T) (paged: over paged->last_rows). loss_scale > 0: training: token losses, and
 * dlogits of that scale in the head's activations; 0: logits only, into `logits` or (NULL) the
 * head's activations. */
Dataflow_Status llama_forward_pass(Dataflow_Llama *model, int stream, const Dataflow_Llama_Batch *batch,
				   const Dataflow_Llama_KV_Cache *kv_cache, const Llama_Paged_Pass *paged, void *logits,
				   int64_t first_row, float loss_scale);

#endif
