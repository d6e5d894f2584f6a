#ifndef DATAFLOW_MODELS_H
#define DATAFLOW_MODELS_H

#include <stdint.h>

#include "dataflow/handle.h"

/* libdataflowmodels: a Llama-3-family decoder (GQA, RoPE with optional Llama-3 scaling,
 * RMSNorm, SwiGLU, tied or untied embeddings) written as explicit compositions of the default
 * ops (libdataflowops), matching Hugging Face LlamaForCausalLM's numerics.
 *
 * Memory. Every model tensor lives in one of num_layers + 2 blocks, each ONE device
 * allocation per kind (weights in the model dtype; gradients, AdamW m and v in fp32), so an
 * orchestrator moves a layer with one transfer:
 *   block 0                 model.embed_tokens.weight
 *   block 1 + i             model.layers.{i}.*  (q, k, v, o, gate, up, down, input_layernorm,
 *                           post_attention_layernorm, in that order)
 *   block num_layers + 1    model.norm.weight, lm_head.weight (untied only)
 * Tensors start at multiples of DATAFLOW_LLAMA_ALIGN elements inside their block; the padding
 * is zero in every kind and stays zero through training. Gradients are allocated at create, m
 * and v at the first AdamW step.
 *
 * Activations. Per token: the residual stream entering every layer (num_layers + 1 rows of
 * hidden) is always kept; the other per-layer activations (normed inputs, rstd, q/k/v after
 * rope, attention out and lse, post-attention residual, gate and up) are kept for every layer,
 * or, with recompute on, for one layer at a time: the backward then reruns each layer's
 * forward from its saved input before differentiating it (same ops, same bits). The workspace
 * is allocated from the handle on first use for a batch size, reused by later calls, and
 * regrown only when a batch has more tokens than any before
 * (dataflow_llama_workspace_bytes says how much).
 *
 * Batches are packed: num_tokens tokens holding num_docs documents back to back
 * (cu_seqlens, FlashAttention's varlen convention), with positions restarting at 0 in each
 * document; attention is causal within a document. Labels are ALIGNED to positions:
 * labels[t] is the token the logits at t must predict (next-token targets, already shifted;
 * DATAFLOW_LLAMA_IGNORE_INDEX where none, e.g. at each document's last token). The Python
 * layer shifts Hugging Face-style labels into this form. */

#define DATAFLOW_LLAMA_ALIGN 32
#define DATAFLOW_LLAMA_IGNORE_INDEX (-100)
#define DATAFLOW_LLAMA_NAME_MAX 96

typedef struct {
	int64_t vocab_size;
	int64_t hidden_size;
	int64_t intermediate_size;
	int64_t num_layers;
	int64_t num_heads;
	int64_t num_kv_heads;    /* divides num_heads */
	int64_t head_dim;        /* 0: hidden_size / num_heads */
	float rms_eps;
	float rope_theta;
	/* Llama-3 rope scaling (HF rope_scaling rope_type "llama3"); factor 0: none. */
	float rope_factor;
	float rope_low_freq_factor;
	float rope_high_freq_factor;
	float rope_original_max_position;
	int tie_embeddings;      /* lm_head shares embed_tokens.weight */
	DataflowDatatype dtype;  /* weights and activations: DATAFLOW_FP32 or DATAFLOW_BF16 */
} Dataflow_Llama_Config;

typedef struct Dataflow_Llama Dataflow_Llama;

/* Which copy of a tensor or block. */
typedef enum {
	DATAFLOW_LLAMA_PARAM = 0, /* config.dtype */
	DATAFLOW_LLAMA_GRAD = 1,  /* fp32 */
	DATAFLOW_LLAMA_ADAM_M = 2, /* fp32, NULL before the first AdamW step */
	DATAFLOW_LLAMA_ADAM_V = 3  /* fp32, NULL before the first AdamW step */
} Dataflow_Llama_Kind;

typedef struct {
	char name[DATAFLOW_LLAMA_NAME_MAX]; /* Hugging Face name, e.g. "model.layers.0.mlp.up_proj.weight" */
	int ndim;                           /* 1 or 2 */
	int64_t shape[2];                   /* Hugging Face shape ([out, in] for linear weights) */
	int64_t numel;
	DataflowDatatype dtype;
	void *ptr;                          /* device pointer (NULL: not allocated yet) */
	int block;                          /* which block holds it */
	int64_t offset;                     /* element offset inside the block */
} Dataflow_Llama_Tensor;

typedef struct {
	int64_t num_tokens;
	int64_t num_docs;
	const int32_t *tokens;     /* device [num_tokens], ids in [0, vocab) (not checked here) */
	const int32_t *labels;     /* device [num_tokens], aligned targets or -100; NULL for forward only */
	const int32_t *cu_seqlens; /* device [num_docs + 1], 0 = cu[0] <= ... <= cu[num_docs] = num_tokens */
	const int32_t *positions;  /* device [num_tokens], restarting at 0 per document */
} Dataflow_Llama_Batch;

/* Checks the config, allocates weight and gradient blocks (zeroed) and the rope table. */
Dataflow_Status dataflow_llama_create(Dataflow_Handle *handle, const Dataflow_Llama_Config *config,
				      Dataflow_Llama **model);
/* Waits for the handle's queued work, then frees every allocation of the model. */
void dataflow_llama_destroy(Dataflow_Llama *model);
/* The config with defaults filled in (head_dim). */
const Dataflow_Llama_Config *dataflow_llama_config(const Dataflow_Llama *model);

/* Number of named tensors (9 per layer + 2, + 1 when untied) and the index-th of them, in
 * Hugging Face's named_parameters() order. */
int dataflow_llama_num_tensors(const Dataflow_Llama *model);
Dataflow_Status dataflow_llama_tensor(const Dataflow_Llama *model, int index, Dataflow_Llama_Kind kind,
				      Dataflow_Llama_Tensor *tensor);
/* Blocks: num_layers + 2. ptr may be NULL (m, v before the first step). */
int dataflow_llama_num_blocks(const Dataflow_Llama *model);
Dataflow_Status dataflow_llama_block(const Dataflow_Llama *model, int block, Dataflow_Llama_Kind kind, void **ptr,
				     int64_t *numel, DataflowDatatype *dtype);

/* Recompute each layer's activations in the backward instead of keeping them (default 0). */
Dataflow_Status dataflow_llama_set_recompute(Dataflow_Llama *model, int recompute);
/* Bytes of activation workspace for batches of up to max_tokens tokens. */
int64_t dataflow_llama_workspace_bytes(const Dataflow_Llama_Config *config, int64_t max_tokens, int recompute);

/* Forward pass. logits_out: device [num_tokens, vocab] of config.dtype, or NULL. With
 * save_for_backward the activations are kept for a backward (internal use; loss_backward
 * runs its own forward). Asynchronous on stream. */
Dataflow_Status dataflow_llama_forward(Dataflow_Llama *model, int stream, const Dataflow_Llama_Batch *batch,
				       void *logits_out, int save_for_backward);

/* KV cache for incremental decoding of ONE sequence: per layer, keys (after RoPE) and values
 * of every token seen so far, K [max_tokens, num_kv_heads, head_dim] then V (same shape) in
 * the model dtype, one device allocation per layer (like the weight blocks), plus small
 * device index tables (positions 0..max_tokens-1 and {0, m} offset pairs) so that a cached
 * forward needs no host-to-device copy and no allocation. A cache is used with the model it
 * was created for; destroying it only needs the handle alive (it may outlive the model). */
typedef struct Dataflow_Llama_KV_Cache Dataflow_Llama_KV_Cache;

/* Allocates a cache for up to max_tokens tokens (1 <= max_tokens < 2^31); synchronizes
 * stream 0 of the model's handle (uploads the index tables). Length starts at 0. */
Dataflow_Status dataflow_llama_kv_cache_create(Dataflow_Llama *model, int64_t max_tokens,
					       Dataflow_Llama_KV_Cache **cache);
/* Waits for the handle's queued work, then frees the cache (NULL: no-op). */
void dataflow_llama_kv_cache_destroy(Dataflow_Llama_KV_Cache *cache);
/* Forgets the cached tokens (length = 0); the memory is kept. */
Dataflow_Status dataflow_llama_kv_cache_reset(Dataflow_Llama_KV_Cache *cache);
/* Tokens held (positions 0..length-1) and capacity; -1 for a NULL cache. */
int64_t dataflow_llama_kv_cache_length(const Dataflow_Llama_KV_Cache *cache);
int64_t dataflow_llama_kv_cache_capacity(const Dataflow_Llama_KV_Cache *cache);
/* Bytes of device memory a cache of max_tokens tokens takes (-1: invalid). */
int64_t dataflow_llama_kv_cache_bytes(const Dataflow_Llama_Config *config, int64_t max_tokens);

/* Forward of num_tokens new tokens (device int32 [num_tokens], ids in [0, vocab), not
 * checked here) continuing the cached sequence at positions length, length + 1, ...: each
 * layer appends the new tokens' K (after RoPE) and V to the cache and attends over the whole
 * cache (attention_kv, causal bottom-right). Then length += num_tokens. logits_out: device
 * [num_tokens, vocab] (all_logits) or [1, vocab] (the last position only) of config.dtype, or
 * NULL. Length + num_tokens > capacity fails (nothing submitted, length unchanged).
 * Asynchronous on stream; reuses the model's workspace (sized for num_tokens tokens). */
Dataflow_Status dataflow_llama_forward_cached(Dataflow_Llama *model, int stream, Dataflow_Llama_KV_Cache *cache,
					      const int32_t *tokens, int64_t num_tokens, void *logits_out,
					      int all_logits);

/* Forward, cross-entropy over batch->labels, backward. Every gradient receives
 *     d/dparam ( loss_scale * sum over tokens t with a label of CE(logits[t], labels[t]) )
 * added to it (accumulate_grads = 1) or written over it (0). For the mean loss of one chunk
 * pass loss_scale = 1 / (its number of labelled tokens); to make k accumulated chunks equal
 * one batch of all of them, pass every chunk loss_scale = 1 / (labelled tokens of ALL k
 * chunks) and step once. loss_out (host, may be NULL) receives loss_scale * the summed token
 * losses (fp64 sum), so with those scales the chunks' loss_outs add up to the batch's mean
 * loss; a non-NULL loss_out synchronizes the stream. */
Dataflow_Status dataflow_llama_loss_backward(Dataflow_Llama *model, int stream, const Dataflow_Llama_Batch *batch,
					     float *loss_out, int accumulate_grads, float loss_scale);

/* Forward and the loss only (gradients untouched): loss_out (host, required) receives
 * loss_scale * the summed token losses; synchronizes the stream. */
Dataflow_Status dataflow_llama_loss(Dataflow_Llama *model, int stream, const Dataflow_Llama_Batch *batch,
				    float *loss_out, float loss_scale);

/* Gradients = 0 (every block). */
Dataflow_Status dataflow_llama_zero_grads(Dataflow_Llama *model, int stream);
/* Gradients *= factor (every block), e.g. 1 / labelled tokens after accumulating summed losses. */
Dataflow_Status dataflow_llama_scale_grads(Dataflow_Llama *model, int stream, float factor);

/* Allocates AdamW's m and v (zeroed) if they are not yet, e.g. before loading them. */
Dataflow_Status dataflow_llama_alloc_optimizer_state(Dataflow_Llama *model, int stream);

/* One torch.optim.AdamW step over every block (step counts from 1), after clipping the
 * global gradient norm to max_grad_norm as torch.nn.utils.clip_grad_norm_ (0: no clipping):
 * grad_norm_sq over all blocks, clip_by_global_norm, then adamw_step per block reading the
 * clip scale from device memory. grad_norm_out (host, may be NULL) receives the pre-clip
 * global norm and synchronizes the stream. Allocates m and v (zeroed) on the first call. */
Dataflow_Status dataflow_llama_adamw_step(Dataflow_Llama *model, int stream, double lr, double beta1, double beta2,
					  double eps, double weight_decay, double max_grad_norm, int64_t step,
					  float *grad_norm_out);

#endif
