#ifndef DATAFLOWMODELS_LLAMA_INTERNAL_H
#define DATAFLOWMODELS_LLAMA_INTERNAL_H

/* Private to libdataflowmodels: the model struct, its workspace layout, shared helpers. */

#include "dataflow/models.h"
#include "dataflow/ops.h"

#define TRY(expr)                                          \
	do {                                               \
		Dataflow_Status st_ = (expr);              \
		if (st_ != DATAFLOW_OK)                    \
			return st_;                        \
	} while (0)

enum { LLAMA_Q, LLAMA_K, LLAMA_V, LLAMA_O, LLAMA_GATE, LLAMA_UP, LLAMA_DOWN, LLAMA_LN1, LLAMA_LN2,
       LLAMA_PER_LAYER };

typedef struct {
	int64_t numel;  /* elements, padding included */
	void *param;    /* config.dtype */
	float *grad;
	float *m, *v;   /* NULL until the first AdamW step */
} Llama_Block;

/* One layer's saved activations (T tokens). */
typedef struct {
	void *xn1, *q, *k, *v, *att, *hmid, *xn2, *gate, *up; /* dtype */
	float *rstd1, *rstd2, *lse;
} Llama_Acts;

typedef struct {
	int64_t tokens;      /* capacity in tokens; 0: not allocated */
	int recompute;       /* layout it was carved for */
	void *base;
	void *resid;         /* [(L + 1), T, H]: the input of every layer, then the final hidden */
	Llama_Acts *acts;    /* L sets, or 1 with recompute */
	void *xnf, *logits;  /* final norm out [T, H]; logits [T, V] (dlogits in place) */
	float *rstdf, *loss;
	/* backward scratch */
	void *dres, *dtmp, *dxn, *dq, *dk, *dv, *datt, *act, *dact; /* dtype */
	float *dw;           /* [H] fp32 */
	void *rms_ws;
	int64_t rms_ws_bytes;
	void *attn_ws;
	int64_t attn_ws_bytes;
	float *host_loss;    /* host [T] */
} Llama_Workspace;

struct Dataflow_Llama {
	Dataflow_Handle *handle;
	Dataflow_Llama_Config config;
	int num_tensors;
	Dataflow_Llama_Tensor *tensors; /* PARAM view; other kinds differ in ptr and dtype */
	int num_blocks;
	Llama_Block *blocks;
	int64_t layer_offset[LLAMA_PER_LAYER];
	int64_t norm_offset, lm_head_offset; /* in the head block; lm_head_offset -1 when tied */
	float *inv_freq;     /* device [head_dim / 2] */
	void *scalars;       /* device: sumsq fp64 [1], clip scale fp32 [1], norm fp32 [1] */
	void *gn_ws;         /* grad_norm_sq workspace for the largest block */
	int recompute;
	Llama_Workspace ws;
};

static inline int64_t llama_dtype_size(DataflowDatatype dtype)
{
	return dtype == DATAFLOW_BF16 ? 2 : 4;
}

static inline void *llama_at(void *base, int64_t elements, DataflowDatatype dtype)
{
	return (char *)base + elements * llama_dtype_size(dtype);
}

/* The weight of a layer tensor (param block 1 + layer) and its fp32 gradient. */
static inline void *llama_w(const Dataflow_Llama *m, int64_t layer, int which)
{
	return llama_at(m->blocks[1 + layer].param, m->layer_offset[which], m->config.dtype);
}

static inline float *llama_g(const Dataflow_Llama *m, int64_t layer, int which)
{
	return m->blocks[1 + layer].grad + m->layer_offset[which];
}

/* Makes sure the workspace holds batches of `tokens` tokens in the current recompute mode. */
Dataflow_Status llama_workspace_reserve(Dataflow_Llama *model, int64_t tokens);
void llama_workspace_free(Dataflow_Llama *model);
Dataflow_Status llama_check_batch(const Dataflow_Llama *model, const Dataflow_Llama_Batch *batch, int need_labels);

struct Dataflow_Llama_KV_Cache {
	Dataflow_Llama *model;   /* compared, never dereferenced by destroy */
	Dataflow_Handle *handle;
	int64_t num_layers;
	int64_t max_tokens, length;
	void **layers;    /* per layer: K [max_tokens, kv_heads, head_dim] then V, one allocation */
	int32_t *tables;  /* device: iota [max_tokens], then pairs {0, m} for m = 0..max_tokens */
};

/* A cached forward step: the batch's tokens are the cache's positions past.. (NULL: a packed
 * batch, keys and values of the batch only). */
typedef struct {
	Dataflow_Llama_KV_Cache *cache;
	int64_t past;
	const int32_t *cu_k; /* device {0, past + num_tokens} */
} Llama_KV_Step;

/* Forward of layer l from resid[l] into resid[l + 1], activations into acts (K and V into the
 * cache when kv is given). */
Dataflow_Status llama_layer_forward(Dataflow_Llama *model, int stream, const Dataflow_Llama_Batch *batch,
				    int64_t layer, const Llama_Acts *acts, const Llama_KV_Step *kv);
void *llama_resid(const Dataflow_Llama *model, int64_t layer);
/* Embedding, every layer, final norm and logits of rows [first_logit_row, T) (into logits,
 * [T - first_logit_row, V]). */
Dataflow_Status llama_forward_all(Dataflow_Llama *model, int stream, const Dataflow_Llama_Batch *batch,
				  void *logits, const Llama_KV_Step *kv, int64_t first_logit_row);

#endif
