#ifndef DATAFLOWMODELS_BLOCKED_INTERNAL_H
#define DATAFLOWMODELS_BLOCKED_INTERNAL_H

/* Private to libdataflowmodels: the blocked Llama's definition and the layouts of the
 * activation, dacts and workspace buffers the per-block calls carve. */

#include "dataflow/blocked_model.h"
#include "dataflow/ops.h"

#define TRY(expr) DATAFLOW_TRY(expr)

/* a layer block's tensors, in block order (= Hugging Face's order); the optional ones (biases,
 * q/k norms) take no elements when the config has none. A mixture-of-experts layer has no
 * GATE, UP, DOWN but the router and its experts' stacked weights instead: EGATE and EUP
 * [num_experts, moe_intermediate, hidden], EDOWN [num_experts, hidden, moe_intermediate] (the
 * layout moe_grouped_matmul reads; the tensor table names each expert's slice) */
enum { LLAMA_Q, LLAMA_QB, LLAMA_K, LLAMA_KB, LLAMA_V, LLAMA_VB, LLAMA_O, LLAMA_OB, LLAMA_QN, LLAMA_KN, LLAMA_GATE,
       LLAMA_UP, LLAMA_DOWN, LLAMA_ROUTER, LLAMA_EGATE, LLAMA_EUP, LLAMA_EDOWN, LLAMA_LN1, LLAMA_LN2,
       LLAMA_PER_LAYER };

/* a layer's activations; the first two are saved from DATAFLOW_SAVE_ATTENTION up, the rest only
 * at DATAFLOW_SAVE_ALL; QPRE..RSTDK (q, k before their per-head norm) are empty without qk_norm.
 * With experts, GATE and UP hold the routed rows (T * top-k of them) and the router's outputs
 * follow: logits and probabilities (fp32 [T, E]), top-k weights (fp32) and ids (int32) [T, k],
 * the permutation's row map and each assignment's row (int32 [T * k]) and expert offsets
 * (int32 [E + 1]), the tokens'
 * rows gathered by expert (XPERM) and the experts' outputs (YPERM) [T * k, H]; all empty
 * when dense */
enum { ACT_ATT, ACT_LSE, ACT_XN1, ACT_Q, ACT_K, ACT_V, ACT_HMID, ACT_XN2, ACT_GATE, ACT_UP, ACT_RSTD1, ACT_RSTD2,
       ACT_QPRE, ACT_KPRE, ACT_RSTDQ, ACT_RSTDK, ACT_RLOGITS, ACT_PROBS, ACT_TOPW, ACT_TOPI, ACT_ROWS, ACT_SLOTS,
       ACT_OFFSETS, ACT_XPERM, ACT_YPERM, LAYER_ACTS };
/* the head's activations (saved at every level) */
enum { HEAD_XNF, HEAD_RSTD, HEAD_LOGITS, HEAD_ACTS };
/* a layer's dacts (the head's: HEAD_DXN only) */
/* (DQN, DKN: gradients at the normed q, k; empty without qk_norm. With experts DGATE, DUP are
 * per routed row, and the gradients at XPERM, YPERM, the router logits (fp32) and the top-k
 * weights (fp32) follow; empty when dense) */
enum { DA_DXN2, DA_DGATE, DA_DUP, DA_DMID, DA_DQ, DA_DK, DA_DV, DA_DXN1, DA_DQN, DA_DKN, DA_DXPERM, DA_DYPERM,
       DA_DLOGITS, DA_DTOPW, LAYER_DACTS };
enum { HEAD_DXN };
/* one call's workspace (ONES: T ones in the model dtype for the bias matmuls; empty without biases;
 * with experts, EXPERT_TMP [T * k, H] and ROUTER [T, E] in the model dtype) */
enum { WS_GRAD_NORM, WS_ACT, WS_DTMP, WS_DATT, WS_DW, WS_RMS, WS_ATTN, WS_ONES, WS_EXPERT_TMP, WS_ROUTER, WS_COUNT };

#define LLAMA_MAX_ACTS LAYER_ACTS

struct Dataflow_Blocked_Model {
	Dataflow_Handle *handle;
	Dataflow_Llama_Config config;
	int num_blocks;
	int64_t layer_offset[LLAMA_PER_LAYER];
	int64_t layer_size[LLAMA_PER_LAYER]; /* elements of each tensor (0: the config has none) */
	int64_t embed_numel, layer_numel, head_numel;
	int64_t norm_offset, lm_head_offset; /* in the head block; lm_head_offset -1 when tied */
	int num_tensors;
	Dataflow_Llama_Tensor *tensors;
	float *inv_freq; /* device [head_dim / 2] */
	float attn_scale; /* of the attention scores: rope's attention factor^2 / sqrt(head_dim) */
};

static inline int64_t llama_dtype_size(DataflowDatatype dtype)
{
	return dtype == DATAFLOW_BF16 ? 2 : 4;
}

static inline void *llama_at(const void *base, int64_t elements, DataflowDatatype dtype)
{
	return (char *)base + elements * llama_dtype_size(dtype);
}

/* A quantized linear weight's parts, in bytes from the start of its region in the layer block
 * (each at a multiple of 64 bytes): the codes, the fp32 scales and (with zero points) the uint8
 * zeros; groups per row and the region's total bytes. */
typedef struct {
	int64_t scales, zeros, groups, bytes;
} Llama_Quant_Parts;

/* whether layer tensor i is a linear weight the config quantizes */
static inline int llama_is_quantized(const Dataflow_Llama_Config *c, int i)
{
	return c->quant_bits && (i == LLAMA_Q || i == LLAMA_K || i == LLAMA_V || i == LLAMA_O || i == LLAMA_GATE ||
				 i == LLAMA_UP || i == LLAMA_DOWN);
}
Llama_Quant_Parts llama_quant_parts(const Dataflow_Llama_Config *c, int64_t rows, int64_t cols);
/* OK, or (a quantized config: its codes have no gradient) the error that `what` (a training
 * call) is refused */
Dataflow_Status llama_refuse_quantized(const Dataflow_Llama_Config *c, const char *what);

/* Checks the config and fills in the definition: defaults, block layouts (no allocation, no
 * handle needed: enough for sizing). */
Dataflow_Status llama_define(Dataflow_Blocked_Model *m, const Dataflow_Llama_Config *config);
Dataflow_Block_Role llama_block_role(const Dataflow_Blocked_Model *m, int block);
int64_t llama_block_numel(const Dataflow_Blocked_Model *m, int block);

/* Pointers into a block's activation buffers for T tokens at a level (NULL buffers: only the
 * sizes); returns the number of arrays. saved_bytes / recomputed_bytes / dacts_bytes may be NULL. */
void llama_acts_layout(const Dataflow_Blocked_Model *m, Dataflow_Block_Role role, Dataflow_Save_Level level,
		       int64_t T, void *saved, void *recomputed, void **acts, int64_t *saved_bytes,
		       int64_t *recomputed_bytes);
int64_t llama_dacts_layout(const Dataflow_Blocked_Model *m, Dataflow_Block_Role role, int64_t T, void *base,
			   void **dacts);
/* The per-token slopes of the activation and dacts sizes, into sizes. */
void llama_acts_per_token(const Dataflow_Blocked_Model *m, Dataflow_Block_Role role, Dataflow_Block_Sizes *sizes);
/* The workspace for T tokens (0: the optimizer's part only); returns its bytes. */
int64_t llama_workspace_layout(const Dataflow_Blocked_Model *m, int64_t T, void *base, void **ws);

/* A layer call's view of its memory: weights, gradients, activations, dacts and workspace
 * carved for its T tokens (llama_layer.c). */
typedef struct {
	const Dataflow_Blocked_Model *m;
	Dataflow_Handle *h;
	DataflowDatatype d;
	int64_t T, H, F, hd, nq, nkv;
	void *w[LLAMA_PER_LAYER]; /* weights */
	float *g[LLAMA_PER_LAYER]; /* gradients (backward_w) */
	void *act[LAYER_ACTS];
	void *da[LAYER_DACTS];
	void *ws[WS_COUNT];
} Layer_View;

/* The mixture-of-experts feed-forward of a layer (llama_moe.c): forward from act[ACT_XN2] to
 * y = act[ACT_HMID] + experts (recompute: every activation the backward reads, no y);
 * backward_x from dy to da[DA_DXN2]; backward_w the router's and experts' gradients. */
Dataflow_Status llama_moe_forward(const Layer_View *L, int s, const Dataflow_Block_Args *a, int recompute);
Dataflow_Status llama_moe_backward_x(const Layer_View *L, int s, const Dataflow_Block_Args *a);
Dataflow_Status llama_moe_backward_w(const Layer_View *L, int s); /* reads dacts only */

/* per-role implementations of the per-block calls (args checked by the caller) */
Dataflow_Status llama_embedding_forward(const Dataflow_Blocked_Model *m, int s, const Dataflow_Block_Memory *mem,
					const Dataflow_Block_Args *a);
Dataflow_Status llama_embedding_backward_w(const Dataflow_Blocked_Model *m, int s, const Dataflow_Block_Memory *mem,
					   const Dataflow_Block_Args *a);
Dataflow_Status llama_layer_forward(const Dataflow_Blocked_Model *m, int s, const Dataflow_Block_Memory *mem,
				    const Dataflow_Block_Args *a, int recompute);
Dataflow_Status llama_layer_backward_x(const Dataflow_Blocked_Model *m, int s, const Dataflow_Block_Memory *mem,
				       const Dataflow_Block_Args *a);
Dataflow_Status llama_layer_backward_w(const Dataflow_Blocked_Model *m, int s, const Dataflow_Block_Memory *mem,
				       const Dataflow_Block_Args *a);
Dataflow_Status llama_head_forward(const Dataflow_Blocked_Model *m, int s, const Dataflow_Block_Memory *mem,
				   const Dataflow_Block_Args *a);
Dataflow_Status llama_head_backward_x(const Dataflow_Blocked_Model *m, int s, const Dataflow_Block_Memory *mem,
				      const Dataflow_Block_Args *a);
Dataflow_Status llama_head_backward_w(const Dataflow_Blocked_Model *m, int s, const Dataflow_Block_Memory *mem,
				      const Dataflow_Block_Args *a);

/* llama_linear for a quantized weight: `region` holds its codes, scales and zeros
 * (llama_quant_parts); the dequantize-matmul of config.quant_bits */
Dataflow_Status llama_quantized_linear(const Dataflow_Blocked_Model *m, int s, const void *x, const void *region,
				       const void *residual, void *out, int64_t T, int64_t n_out, int64_t n_in);
/* out[T, n_out] = x[T, n_in] W[n_out, n_in]^T (+ residual[T, n_out] when given) */
Dataflow_Status llama_linear(const Dataflow_Blocked_Model *m, int s, const void *x, const void *W,
			     const void *residual, void *out, int64_t T, int64_t n_out, int64_t n_in);
/* g[n_out, n_in] += dy[T, n_out]^T x[T, n_in], fp32 accumulation into the fp32 gradient (with
 * x = ones[T, 1]: a bias gradient, the column sums of dy) */
Dataflow_Status llama_weight_grad(const Dataflow_Blocked_Model *m, int s, const void *dy, const void *x, float *g,
				  int64_t T, int64_t n_out, int64_t n_in);
/* dx[T, n_in] (+)= dy[T, n_out] W[n_out, n_in] */
Dataflow_Status llama_input_grad(const Dataflow_Blocked_Model *m, int s, const void *dy, const void *W, void *dx,
				 int64_t T, int64_t n_out, int64_t n_in, int accumulate);
/* gw[width] += rms_norm_bwd_w(dxn, x, rstd) over rows x width, through workspace's dw and partials */
Dataflow_Status llama_norm_weight_grad(const Dataflow_Blocked_Model *m, int s, int64_t rows, int64_t width,
				       const void *dxn, const void *x, const float *rstd, float *gw,
				       void *const ws[WS_COUNT]);
/* out[T, n] = ones[T] b[n] (+ residual[T, n] when given): a bias broadcast over rows, exact */
Dataflow_Status llama_bias_rows(const Dataflow_Blocked_Model *m, int s, const void *ones, const void *b,
				const void *residual, void *out, int64_t T, int64_t n);

#endif
