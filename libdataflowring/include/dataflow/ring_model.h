#ifndef DATAFLOW_RING_MODEL_H
#define DATAFLOW_RING_MODEL_H

#include <stdint.h>

#include "dataflow/blocked_model.h"

/* What the ring planner knows of a model: per block, the sizes the blocked-model interface
 * reports (bytes per kind, activations per token at each save level) and its compute per
 * token. Plain values, no handle: a plan can be made on a machine that will never run it.
 * Blocks follow blocked_model.h: block 0 the embedding, 1..num_blocks-2 the layers, the last
 * the head. */

typedef struct {
	Dataflow_Block_Sizes sizes;
	/* one forward, per token: 2 * the weights the token meets in matmuls */
	double matmul_flops_per_token;
	/* one forward, per (query, key) pair inside the causal window: 4 * heads * head_dim */
	double attention_flops_per_pair;
	/* bytes memory-bound ops (norms, RoPE, SwiGLU, residuals, loss) move per token in one
	 * forward; the backward moves twice as many */
	double memory_bytes_per_token;
	/* keys + values one token leaves as context for later chunks of its sequence */
	int64_t kv_bytes_per_token;
	/* the most keys a query attends to (a sliding window); 0: every earlier key */
	int64_t attention_window;
} Dataflow_Ring_Block;


typedef struct {
	int num_blocks;                   /* >= 3: embedding, at least one layer, head */
	const Dataflow_Ring_Block *blocks;
	int64_t hidden_bytes_per_token;   /* a block's input or output (x, y, dx, dy) per token */
	/* an upper bound on dataflow_blocked_model_workspace_bytes(model, T): fixed + per_token * T */
	int64_t workspace_fixed_bytes, workspace_bytes_per_token;
	int tied;                         /* the head reads the embedding block's weights */
	/* a mixture of experts in every layer (0 experts: dense): each token meets experts_per_tok
	 * of them; expert_param_bytes is one expert's weights. The compute assumes an even routing
	 * (every expert gets tokens * experts_per_tok / num_experts of a chunk). */
	int64_t num_experts, experts_per_tok;
	uint64_t expert_param_bytes;
} Dataflow_Ring_Model;

/* Fills blocks[0..num_blocks) and *out from a blocked model (num_blocks =
 * dataflow_blocked_model_num_blocks(model); capacity: entries blocks can hold). out->blocks
 * points at blocks. */
Dataflow_Status dataflow_ring_model_from_blocked(const Dataflow_Blocked_Model *model, Dataflow_Ring_Block *blocks,
						 int capacity, Dataflow_Ring_Model *out);

#endif
