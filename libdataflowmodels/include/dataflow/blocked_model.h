#ifndef DATAFLOW_BLOCKED_MODEL_H
#define DATAFLOW_BLOCKED_MODEL_H

#include <stdint.h>

#include "dataflow/handle.h"
#include "dataflow/llama_config.h"

/* The blocked-model interface: a model as a chain of blocks whose memory the CALLER places.
 *
 * A Dataflow_Blocked_Model knows the architecture (and holds a few hundred bytes of constant
 * tables, e.g. RoPE frequencies, on its handle) but owns no weights, gradients, optimizer state
 * or activations. Every per-block function takes explicit device pointers for the block's
 * memory (Dataflow_Block_Memory) and for the activations it reads and writes
 * (Dataflow_Block_Args), submits ops on the given stream and returns: no host sync, no
 * allocation, no host-side state changes, so the same blocks can be driven by the
 * all-resident model's forward (dataflow_llama_*, models.h), by the ring executor (training,
 * ring_executor.h), or by a test from memory it allocated itself.
 *
 * Blocks of a Llama (num_layers + 2), each ONE contiguous array per kind:
 *   block 0              EMBEDDING  model.embed_tokens.weight
 *   block 1 + l          LAYER      model.layers.{l}.* (q, [q bias], k, [k bias], v, [v bias], o,
 *                                   [o bias], [q_norm, k_norm], gate, up, down, input_layernorm,
 *                                   post_attention_layernorm, in that order; [optional] per the
 *                                   config's qkv_bias, o_bias, qk_norm; a mixture of experts has
 *                                   the router and every expert's gate, up, down weights, each
 *                                   kind stacked over the experts, in place of gate, up, down)
 *   block num_layers + 1 HEAD       model.norm.weight, lm_head.weight (untied only)
 * Tensors start at multiples of DATAFLOW_LLAMA_ALIGN elements inside their block
 * (dataflow_blocked_model_tensor gives names, shapes and offsets); the padding must be zero in
 * every kind and stays zero through training. A tied model's head reads the embedding block's
 * weights and adds into its gradient (args.tied).
 *
 * Activations, for a chunk of T tokens (T = batch->num_tokens; H = hidden_size):
 *   x, y    the block's input and output hidden states [T, H] (model dtype): y of block b is
 *           x of block b + 1. The caller keeps the inputs it needs for the backward (the
 *           residual stream entering each layer).
 *   saved   what a layer keeps from its forward to its backward beyond x, at a save level:
 *             DATAFLOW_SAVE_INPUT      nothing: the backward reruns the whole layer forward
 *             DATAFLOW_SAVE_ATTENTION  attention output + logsumexp: reruns all but attention
 *             DATAFLOW_SAVE_ALL        everything: no recompute
 *           The head saves everything at every level (its forward, loss and backward run back
 *           to back); the embedding saves nothing.
 *   recomputed  the activations the level does not save: written by forward and recompute,
 *           read by the backward; scratch between chunks.
 *   dacts   activation gradients that backward_x hands to backward_w of the same chunk.
 *   workspace  scratch of one call, free once the call's ops have run (stream order).
 * Sizes are exact functions of T (each array 64-byte aligned): dataflow_block_acts_bytes,
 * dataflow_blocked_model_workspace_bytes. The per-token figures in Dataflow_Block_Sizes are
 * their slopes, for planning. Layouts depend on (level, T) only: a saved buffer written by a
 * forward at (level, T) is read back by a recompute/backward at the same (level, T), wherever
 * it was moved in between.
 *
 * Gradients are fp32 and ACCUMULATE (backward_w adds; zero them with set_mem). AdamW state
 * (m, v) is fp32; optional fp32 master weights (bf16 models) are the copy AdamW updates, the
 * bf16 weights being its rounding.
 *
 * Losses stay on the device: the head writes the cross-entropy of every token (fp32, 0 where
 * the label is ignored) into args.token_losses, wherever the caller points it (e.g. the
 * chunk's slice of a step-long array). The loss of a batch is loss_scale * the fp64 sum of its
 * token losses in token order (dataflow_batch_loss, on a host copy read once per step).
 *
 * How a ring drives it (issue 9: chunks of a step, layer-major, offload and prefetch):
 *   per step:   set_mem(grads of every block, 0); inbound each chunk's packed batch (one
 *               buffer per chunk, dataflow_batch_from_buffer)
 *   forward:    for each chunk c: forward(block 0) -> X[0][c]
 *               for each layer l (ring slot holds W[l]; W[l + 1] prefetched meanwhile):
 *                 for each chunk c: forward(l, x = X[l][c], y = X[l + 1][c], saved = S[l][c],
 *                                           recomputed = scratch)
 *                   offload X[l][c] and S[l][c] (outbound stream, after an event), or keep them
 *   turn:       for each chunk c (head resident): forward(head, x = X[L][c], token_losses =
 *               losses + offset(c), loss_scale) ; backward_x(head) -> dX[c] ; backward_w(head)
 *   backward:   for each layer l from the last (slots reversed: no refetch of the last ones),
 *                 for each chunk c in reverse (X[l][c], S[l][c] prefetched in reverse order):
 *                   recompute(l, level) ; backward_x(l, dy = dX[c], dx = dX'[c]) ;
 *                   backward_w(l, grads of slot l) -- gradients accumulate over chunks
 *                 then grad_norm_sq(l, accumulate) and send grad[l] to the host (or keep it)
 *                 (the executor sums blocks 0..N-1; another order gives the same norm
 *                 up to fp64 rounding)
 *               for each chunk c: backward_w(block 0, dy = dX[c])
 *   optimizer:  clip_by_global_norm(sumsq -> scale) once every block's norm is in, then
 *               adamw(b, scale) per block, on the device with param/grad/m/v/master streamed
 *               through slots, or on a host handle; read token losses + norm: one sync.
 * Long sequences: a document longer than a chunk runs as consecutive chunks (one document
 * each, num_docs 1) with positions that continue and the label of a chunk's last token being
 * the next chunk's first. Per layer, a K/V context (args.kv: k, v of the whole document,
 * and fp32 dk, dv) lives from the layer's forward to its backward:
 *   forward:    for each chunk c in order: forward(l, kv = {past = start of c}) writes c's
 *               keys and values at rows past.. and attends over rows [0, past + T)
 *   backward:   set_mem(dk, dv, 0); for each chunk c in REVERSE: recompute(l, same kv) ;
 *               backward_x(l, same kv) adds c's key/value gradients into dk, dv rows
 *               [0, past + T) (attention_kv_bwd) and reads c's own rows, complete by then
 *               (every later chunk attended to them before) ; backward_w(l)
 * At backward_x, k, v rows [0, past + T) must hold THIS layer's keys and values: a caller
 * that shares one context between layers (what the ring planner budgets) rebuilds them first,
 * e.g. by a forward of the earlier chunks (recompute does not write them at SAVE_ALL).
 * Within 1e-5 (fp32) of running the document as one chunk: only the order of the fp32 sums
 * over chunks differs. The head's saved activations hold the chunk's logits [T, vocab]:
 * the chunk size bounds them. */

/* ---- batches ---- */

/* A packed chunk: num_tokens tokens holding num_docs documents back to back (cu_seqlens,
 * FlashAttention's varlen convention), positions restarting at 0 in each document, attention
 * causal within a document. Labels are ALIGNED to positions: labels[t] is the token the
 * logits at t must predict (next-token targets, already shifted; DATAFLOW_LLAMA_IGNORE_INDEX
 * where none, e.g. at each document's last token). Every array is int32 device memory. */
typedef struct {
	int64_t num_tokens;
	int64_t num_docs;
	const int32_t *tokens;     /* [num_tokens], ids in [0, vocab) (not checked here) */
	const int32_t *labels;     /* [num_tokens], aligned targets or -100; NULL: no loss */
	const int32_t *cu_seqlens; /* [num_docs + 1], 0 = cu[0] <= ... <= cu[num_docs] = num_tokens */
	const int32_t *positions;  /* [num_tokens], restarting at 0 per document */
} Dataflow_Llama_Batch;

/* One int32 buffer holds a whole batch, so it goes up in ONE inbound transfer:
 *   tokens [T], positions [T], labels [T] (with_labels only), cu_seqlens [D + 1]
 * numel: the buffer's length in int32 elements (-1: invalid sizes). */
int64_t dataflow_batch_buffer_numel(int64_t num_tokens, int64_t num_docs, int with_labels);
/* Points batch's arrays into buffer (device or host; nothing is read). */
Dataflow_Status dataflow_batch_from_buffer(const int32_t *buffer, int64_t num_tokens, int64_t num_docs,
					   int with_labels, Dataflow_Llama_Batch *batch);
/* loss_scale * (sum of token_losses[0..n) in fp64, in order), rounded to fp32: the loss of a
 * batch from a host copy of its token losses. */
float dataflow_batch_loss(const float *token_losses, int64_t n, float loss_scale);

/* ---- the model and its blocks ---- */

typedef struct Dataflow_Blocked_Model Dataflow_Blocked_Model;

typedef enum { DATAFLOW_BLOCK_EMBEDDING = 0, DATAFLOW_BLOCK_LAYER = 1, DATAFLOW_BLOCK_HEAD = 2 } Dataflow_Block_Role;

/* Which copy of a block (or tensor). */
typedef enum {
	DATAFLOW_BLOCK_PARAM = 0,  /* config.dtype */
	DATAFLOW_BLOCK_GRAD = 1,   /* fp32 */
	DATAFLOW_BLOCK_ADAM_M = 2, /* fp32 */
	DATAFLOW_BLOCK_ADAM_V = 3, /* fp32 */
	DATAFLOW_BLOCK_MASTER = 4, /* fp32 master weights (bf16 models only) */
	DATAFLOW_BLOCK_NUM_KINDS = 5
} Dataflow_Block_Kind;

typedef enum {
	DATAFLOW_SAVE_INPUT = 0,
	DATAFLOW_SAVE_ATTENTION = 1,
	DATAFLOW_SAVE_ALL = 2,
	DATAFLOW_NUM_SAVE_LEVELS = 3
} Dataflow_Save_Level;

typedef struct {
	Dataflow_Block_Role role;
	int64_t numel;                            /* elements of every kind, padding included */
	int64_t bytes[DATAFLOW_BLOCK_NUM_KINDS];  /* per kind; MASTER: 0 for an fp32 model */
	/* activations per token (slopes of dataflow_block_acts_bytes) */
	int64_t saved_bytes_per_token[DATAFLOW_NUM_SAVE_LEVELS];
	int64_t recomputed_bytes_per_token[DATAFLOW_NUM_SAVE_LEVELS];
	int64_t dacts_bytes_per_token;
} Dataflow_Block_Sizes;

/* A named tensor: where it lives inside its block. */
typedef struct {
	char name[DATAFLOW_LLAMA_NAME_MAX]; /* Hugging Face name, e.g. "model.layers.0.mlp.up_proj.weight" */
	int ndim;                           /* 1 or 2 */
	int64_t shape[2];                   /* Hugging Face shape ([out, in] for linear weights) */
	int64_t numel;
	DataflowDatatype dtype;
	void *ptr;                          /* device pointer when given by a model that owns memory, else NULL */
	int block;                          /* which block holds it */
	int64_t offset;                     /* offset inside the block, in elements of the kind's dtype (weights: the model dtype, even for a quantized weight's int8 codes and fp32 scales) */
} Dataflow_Llama_Tensor;

/* Checks the config and uploads the RoPE table (synchronizes stream 0 of the handle once). */
Dataflow_Status dataflow_llama_blocked_model_create(Dataflow_Handle *handle, const Dataflow_Llama_Config *config,
						    Dataflow_Blocked_Model **model);
/* Waits for the handle's queued work, then frees the tables (NULL: no-op). */
void dataflow_blocked_model_destroy(Dataflow_Blocked_Model *model);
/* The config with defaults filled in (head_dim). */
const Dataflow_Llama_Config *dataflow_blocked_model_config(const Dataflow_Blocked_Model *model);
int dataflow_blocked_model_num_blocks(const Dataflow_Blocked_Model *model);
Dataflow_Status dataflow_blocked_model_block_sizes(const Dataflow_Blocked_Model *model, int block,
						   Dataflow_Block_Sizes *sizes);
/* Named tensors (9 per layer, + 3 with qkv_bias, + 1 with o_bias, + 2 with qk_norm; a mixture
 * of experts: the router and 3 per expert instead of gate, up, down; + 2, + 1 when untied), in
 * Hugging Face's named_parameters() order (experts: its checkpoint names, one tensor per expert
 * and matrix); ptr NULL, dtype the PARAM dtype. */
int dataflow_blocked_model_num_tensors(const Dataflow_Blocked_Model *model);
Dataflow_Status dataflow_blocked_model_tensor(const Dataflow_Blocked_Model *model, int index,
					      Dataflow_Llama_Tensor *tensor);

/* Exact bytes, for chunks of num_tokens tokens, of a block's saved and recomputed activations
 * at a level and of its dacts (any pointer may be NULL). -1 and an error for bad arguments. */
Dataflow_Status dataflow_block_acts_bytes(const Dataflow_Blocked_Model *model, int block, Dataflow_Save_Level level,
					  int64_t num_tokens, int64_t *saved, int64_t *recomputed, int64_t *dacts);
/* Bytes of the workspace of any per-block call on chunks of up to num_tokens tokens (0: of the
 * optimizer calls only, which need less than any chunk). -1 for bad arguments. */
int64_t dataflow_blocked_model_workspace_bytes(const Dataflow_Blocked_Model *model, int64_t num_tokens);

/* ---- per-block calls ---- */

/* A block's memory; each kind [numel] (sizes.bytes). Pointers a call does not use may be NULL:
 * forward / recompute / backward_x read param; backward_w adds into grad; adamw updates param,
 * m, v and master from grad (master NULL: a bf16 param is updated through fp32 and rounded
 * back, losing updates under half a bf16 step). */
typedef struct {
	void *param;
	float *grad;
	float *m, *v;
	float *master;
} Dataflow_Block_Memory;

/* Keys and values of earlier tokens for a layer (KV cache, chunked long sequences): the chunk
 * is ONE document (num_docs 1) continuing those tokens; its keys (after RoPE) and values are
 * written at rows past.. of k and v ([capacity, num_kv_heads, head_dim], model dtype) and it
 * attends causally (bottom-right) over rows [0, past + T). backward_x adds the chunk's
 * gradients of rows [0, past + T) into dk, dv (fp32, same shape; the forward and recompute
 * do not use them) and reads its own rows back (see "Long sequences" above). */
typedef struct {
	void *k, *v;
	int64_t past;
	const int32_t *cu_k;  /* device {0, past + T} */
	float *dk, *dv;       /* backward_x: the context's gradients, accumulated */
} Dataflow_Block_KV;

/* A batch of sequences over a paged KV cache (inference: the layer forward only). The chunk
 * holds num_docs sequences' new tokens (cu_seqlens; positions continue each sequence); their
 * keys (after RoPE) and values go into the pages at slot_mapping (paged_kv_write) and they
 * attend with paged_attention over the sequences' page tables and lengths (dataflow/ops.h). */
typedef struct {
	void *k_pages, *v_pages;     /* [num_pages, page_size, num_kv_heads, head_dim], model dtype */
	const int32_t *slot_mapping; /* [num_tokens]: page * page_size + row of each new token */
	const int32_t *page_table;   /* [num_docs, max_pages] */
	const int32_t *seq_lens;     /* [num_docs]: keys per sequence, its new tokens included */
	int64_t num_pages, page_size, max_pages, split_size;
	void *workspace;             /* paged_attention's, of workspace_bytes */
	int64_t workspace_bytes;
} Dataflow_Block_Paged_KV;

/* HF's load-balancing loss of a forward pass (load_balancing_loss_func over every layer's router
 * logits; a pass = the chunks whose forwards run before their backwards, e.g. a ring round).
 * It is a product of means over the pass's tokens x layers, not a sum over chunks, so the
 * forwards gather statistics first: each layer forward (not recompute) adds its chunk's routing
 * into stats (moe_router_stats); once the pass's forwards are in,
 * dataflow_blocked_model_router_loss turns them into the loss, and each layer's backward_x adds
 * d_loss times its gradient into the router's (moe_aux_loss_bwd; the counts have none). */
typedef struct {
	float *stats;   /* fp32 [2, num_experts], zeroed before the pass's first forward */
	int64_t tokens; /* the pass's tokens (every chunk's; data-parallel: every rank's) */
	float d_loss;   /* backward_x: the loss's weight (router_aux_loss_coef; 0 in forwards) */
} Dataflow_Block_Router_Loss;

/* The load-balancing loss (fp32 [1], device) of a pass from router->stats and router->tokens
 * (moe_aux_loss with rows = tokens x layers), on stream; not a mixture of experts: an error. */
Dataflow_Status dataflow_blocked_model_router_loss(const Dataflow_Blocked_Model *model, int stream,
						   const Dataflow_Block_Router_Loss *router, float *loss);

/* The activations and data of one call (see the top of this header); which fields a call
 * reads or writes:
 *                forward                 recompute        backward_x            backward_w
 *   EMBEDDING    batch -> y              -                -                     batch, dy
 *   LAYER        x -> y, saved,          x, saved ->      x, saved, recomputed, x, saved, recomputed,
 *                recomputed (kv)         recomputed (kv)  dy -> dx, dacts (kv)  dy, dacts
 *   HEAD         x -> saved; y = logits  -                x, saved ->           x, saved, dacts
 *                or labels -> token_losses                 dx, dacts
 * Every call may use workspace. */
typedef struct {
	const Dataflow_Llama_Batch *batch;  /* the chunk (always required) */
	Dataflow_Save_Level level;          /* layers: the save level the saved buffer was laid out for */
	const void *x;                      /* [T, H] block input */
	void *y;                            /* [T, H] block output; head: logits [T, vocab] or NULL */
	void *saved;
	void *recomputed;
	const void *dy;                     /* [T, H] gradient at y; backward_w reads it too */
	void *dx;                           /* [T, H] gradient at x (written, not added; not dy) */
	void *dacts;
	void *workspace;
	/* head forward for training (batch->labels required): y NULL, logits stay in saved and
	 * become dlogits = loss_scale * (softmax - onehot); token_losses fp32 [T] */
	float *token_losses;
	float loss_scale;
	const Dataflow_Block_Memory *tied;  /* tied head: the embedding block's memory */
	const Dataflow_Block_KV *kv;        /* layer forward, recompute, backward_x: context (NULL: the chunk alone) */
	const Dataflow_Block_Paged_KV *paged; /* layer forward: a paged cache instead (kv is then NULL) */
	const Dataflow_Block_Router_Loss *router; /* layers of a mixture of experts trained with HF's
						   * load-balancing loss (NULL: none; backward_x then refuses
						   * a config with router_aux_loss_coef > 0) */
} Dataflow_Block_Args;

Dataflow_Status dataflow_block_forward(const Dataflow_Blocked_Model *model, int block, int stream,
				       const Dataflow_Block_Memory *memory, const Dataflow_Block_Args *args);
/* Rebuilds a layer's recomputed activations from x and saved (no-op at DATAFLOW_SAVE_ALL and
 * for the embedding and head); bit for bit what the forward wrote. */
Dataflow_Status dataflow_block_recompute(const Dataflow_Blocked_Model *model, int block, int stream,
					 const Dataflow_Block_Memory *memory, const Dataflow_Block_Args *args);
/* Gradient at the block's input (dx) and the dacts backward_w needs; no-op for the embedding. */
Dataflow_Status dataflow_block_backward_x(const Dataflow_Blocked_Model *model, int block, int stream,
					  const Dataflow_Block_Memory *memory, const Dataflow_Block_Args *args);
/* Adds the block's weight gradients (fp32) into memory->grad (tied head: also tied->grad). */
Dataflow_Status dataflow_block_backward_w(const Dataflow_Blocked_Model *model, int block, int stream,
					  const Dataflow_Block_Memory *memory, const Dataflow_Block_Args *args);

/* sumsq (device fp64 [1]) = (accumulate ? sumsq : 0) + sum of grad^2 over the block,
 * deterministically (grad_norm_sq). */
Dataflow_Status dataflow_block_grad_norm_sq(const Dataflow_Blocked_Model *model, int block, int stream,
					    const float *grad, void *workspace, double *sumsq, int accumulate);

typedef struct {
	double lr, beta1, beta2, eps, weight_decay;
	uint64_t seed; /* stochastic rounding of bf16 optimizer state (the ring executor's); fp32 state ignores it */
} Dataflow_AdamW_Params;

/* One torch.optim.AdamW step (step counts from 1) over the block: memory param, grad, m, v
 * (and master when non-NULL); grad scaled by clip_scale[0] (device fp32, e.g. written by
 * clip_by_global_norm; NULL: no clipping). */
Dataflow_Status dataflow_block_adamw(const Dataflow_Blocked_Model *model, int block, int stream,
				     const Dataflow_Block_Memory *memory, const Dataflow_AdamW_Params *params,
				     const float *clip_scale, int64_t step);

#endif
