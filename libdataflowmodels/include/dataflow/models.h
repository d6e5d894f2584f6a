#ifndef DATAFLOW_MODELS_H
#define DATAFLOW_MODELS_H

#include <stdint.h>

#include "dataflow/blocked_model.h"
#include "dataflow/handle.h"
#include "dataflow/llama_config.h"

/* libdataflowmodels: a Llama-3-family decoder written as explicit compositions of the default
 * ops (libdataflowops), matching Hugging Face LlamaForCausalLM's numerics, as blocks
 * (blocked_model.h) and as this ALL-RESIDENT model: a thin owner that allocates every block
 * and the activations on its handle and calls the per-block functions in order.
 *
 * Memory. One device allocation per block and kind (weights in the model dtype; gradients,
 * AdamW m and v, and optional fp32 master weights in fp32), laid out as blocked_model.h says,
 * so an orchestrator moves a layer with one transfer. Weights and gradients are allocated (zeroed)
 * at create, m and v when asked for (dataflow_llama_alloc_optimizer_state), master weights when
 * enabled. The model owns these blocks; it does not train them: the ring executor
 * (libdataflowring, dataflow_ring_executor_adopt) trains them in place.
 *
 * Activations. The forward keeps the residual stream entering every layer (num_layers + 1 rows
 * of hidden per token) and one layer's other activations at a time, in a workspace allocated
 * from the handle on first use for a batch size, reused by later calls, and regrown only when a
 * batch has more tokens than any before.
 *
 * Batches: Dataflow_Llama_Batch (blocked_model.h), e.g. from one packed buffer
 * (dataflow_batch_from_buffer). No call below waits for the device except create and destroy:
 * results (token losses) stay in device memory (dataflow_llama_outputs). */

typedef struct Dataflow_Llama Dataflow_Llama;

/* Checks the config, allocates weight and gradient blocks (zeroed) and the rope table. */
Dataflow_Status dataflow_llama_create(Dataflow_Handle *handle, const Dataflow_Llama_Config *config,
				      Dataflow_Llama **model);
/* Waits for the handle's queued work, then frees every allocation of the model. */
void dataflow_llama_destroy(Dataflow_Llama *model);
/* The config with defaults filled in (head_dim). */
const Dataflow_Llama_Config *dataflow_llama_config(const Dataflow_Llama *model);
/* The blocked model the resident model drives (owned by it). */
const Dataflow_Blocked_Model *dataflow_llama_blocked_model(const Dataflow_Llama *model);

/* Number of named tensors (as dataflow_blocked_model_num_tensors) and the index-th of them, in
 * Hugging Face's named_parameters() order, with ptr into the block of that kind (NULL when
 * that kind is not allocated: m, v before the first step, master unless enabled). */
int dataflow_llama_num_tensors(const Dataflow_Llama *model);
Dataflow_Status dataflow_llama_tensor(const Dataflow_Llama *model, int index, Dataflow_Block_Kind kind,
				      Dataflow_Llama_Tensor *tensor);
/* Blocks: num_layers + 2. Every kind's device pointer (NULL where not allocated). */
int dataflow_llama_num_blocks(const Dataflow_Llama *model);
Dataflow_Status dataflow_llama_block(const Dataflow_Llama *model, int block, Dataflow_Block_Memory *memory);

/* fp32 master weights for a bf16 model (error for fp32): allocates them (once) as exact
 * copies of the weights, in stream order. From then on an executor's AdamW updates the masters
 * and writes their bf16 rounding into the weights. */
Dataflow_Status dataflow_llama_enable_master_weights(Dataflow_Llama *model, int stream);

/* Forward pass. logits_out: device [num_tokens, vocab] of config.dtype, or NULL. */
Dataflow_Status dataflow_llama_forward(Dataflow_Llama *model, int stream, const Dataflow_Llama_Batch *batch,
				       void *logits_out);

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

/* Paged KV cache for batched decoding (continuous batching): every layer's keys (after RoPE)
 * and values in fixed-size pages of ONE device allocation of the handle (under its ledger),
 *   [num_layers][K, V][num_pages][page_size][num_kv_heads][head_dim]   model dtype,
 * plus step tables and paged_attention's workspace. Sequences join (add_sequence) and leave
 * (free_sequence) between steps; a sequence takes pages from the pool as it grows and returns
 * them all when freed. Limits fixed at create: max_seqs sequences alive, max_seq_tokens
 * tokens per sequence, max_batch_tokens new tokens per step. A sequence's result depends on
 * its own tokens only, never on the other sequences of a step. */
typedef struct Dataflow_Llama_Paged_Cache Dataflow_Llama_Paged_Cache;

/* Allocates the pool and reserves the model's workspace for max_batch_tokens tokens. */
Dataflow_Status dataflow_llama_paged_cache_create(Dataflow_Llama *model, int64_t num_pages, int64_t page_size,
						  int64_t max_seqs, int64_t max_seq_tokens, int64_t max_batch_tokens,
						  Dataflow_Llama_Paged_Cache **cache);
/* Waits for the handle's queued work, then frees the cache (NULL: no-op). */
void dataflow_llama_paged_cache_destroy(Dataflow_Llama_Paged_Cache *cache);
/* A new empty sequence: *seq is its id in [0, max_seqs). Fails when max_seqs are alive. */
Dataflow_Status dataflow_llama_paged_cache_add_sequence(Dataflow_Llama_Paged_Cache *cache, int64_t *seq);
/* Returns the sequence's pages to the pool; its id may be reused. */
Dataflow_Status dataflow_llama_paged_cache_free_sequence(Dataflow_Llama_Paged_Cache *cache, int64_t seq);
/* Tokens a live sequence holds; -1 for a NULL cache or an id that is not alive. */
int64_t dataflow_llama_paged_cache_length(const Dataflow_Llama_Paged_Cache *cache, int64_t seq);
/* Pages not held by any sequence; -1 for a NULL cache. */
int64_t dataflow_llama_paged_cache_free_pages(const Dataflow_Llama_Paged_Cache *cache);
/* Bytes of the page pool of num_pages pages of page_size tokens (-1: invalid). */
int64_t dataflow_llama_paged_cache_pool_bytes(const Dataflow_Llama_Config *config, int64_t num_pages,
					      int64_t page_size);

/* One step of continuous batching: sequences seqs[0..num_seqs) (distinct, alive) each append
 * num_new[i] >= 1 tokens (tokens: host int32, the sequences' new tokens back to back, ids in
 * [0, vocab)): a prompt, a chunk of one, or the last sampled token. Every layer writes their
 * K/V into the sequences' pages and attends over each sequence's cache (paged_attention).
 * logits_out: device [num_seqs, vocab] of config.dtype, the logits of each sequence's last
 * new token. Pages for the new tokens are taken first: when the pool is short, or a limit is
 * passed, nothing is submitted and no sequence changes (the pool's shortage is
 * DATAFLOW_ERR_OUT_OF_MEMORY). Asynchronous on stream; the host arrays may be reused on
 * return (they are copied). */
Dataflow_Status dataflow_llama_forward_paged(Dataflow_Llama *model, int stream, Dataflow_Llama_Paged_Cache *cache,
					     int64_t num_seqs, const int64_t *seqs, const int64_t *num_new,
					     const int32_t *tokens, void *logits_out);

/* Installs m, v and fp32 master weights that the caller laid out anew (blocks[b].m, .v,
 * .master of every block; the other kinds are ignored), e.g. ZeRO-1's shards
 * (dataflow_ring_shard_optimizer_state, which frees the old memory): the model owns them from
 * then on. state_numel[b]: the elements of block b's state in that layout (NULL: the block's
 * own layout); while it is another, dataflow_llama_tensor of m, v and master and
 * enable_master_weights fail, and alloc_optimizer_state allocates state_numel[b] elements. */
Dataflow_Status dataflow_llama_set_optimizer_state(Dataflow_Llama *model, const Dataflow_Block_Memory *blocks,
						   const int64_t *state_numel);

/* Forward and the token losses only (gradients untouched). Asynchronous on stream. */
Dataflow_Status dataflow_llama_loss(Dataflow_Llama *model, int stream, const Dataflow_Llama_Batch *batch);

/* Device results of the last loss, valid until the next call that writes them: token_losses,
 * fp32 [num_tokens], the unscaled cross-entropy per token (0 where unlabelled). */
typedef struct {
	const float *token_losses;
	int64_t num_tokens;
} Dataflow_Llama_Outputs;
Dataflow_Status dataflow_llama_outputs(const Dataflow_Llama *model, Dataflow_Llama_Outputs *outputs);

/* Allocates AdamW's m and v (zeroed) if they are not yet, e.g. before loading them. */
Dataflow_Status dataflow_llama_alloc_optimizer_state(Dataflow_Llama *model, int stream);

#endif
