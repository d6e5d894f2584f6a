#ifndef DATAFLOW_LLAMA_CONFIG_H
#define DATAFLOW_LLAMA_CONFIG_H

#include <stdint.h>

#include "dataflow/datatype.h"
#include "dataflow/ops.h"

/* The architecture of a decoder of the Llama-3 / Qwen2 / Qwen3 / Mistral families (GQA,
 * RoPE with HF's default, linear, llama3 or yarn frequencies, RMSNorm, SwiGLU, tied or untied embeddings, optional
 * attention biases and per-head q/k RMSNorm, an optional sliding window) and of the mixture-of-
 * experts families Mixtral and Qwen3-MoE (every layer's SwiGLU replaced by num_experts experts
 * and a router), in Hugging Face config.json terms. */

#define DATAFLOW_LLAMA_ALIGN 32 /* tensors start at multiples of this many elements in a block */
#define DATAFLOW_LLAMA_IGNORE_INDEX (-100)
#define DATAFLOW_LLAMA_NAME_MAX 96
/* The most layers a config may ask for: real models have ~130, and every per-layer table (names,
 * blocks, KV cache) is sized from this count before any memory check could refuse it. */
#define DATAFLOW_LLAMA_MAX_LAYERS 1024
/* The most elements of one weight matrix (2^44: far past any real model), so that no byte count
 * over layers and kinds overflows int64_t. */
#define DATAFLOW_LLAMA_MAX_MATRIX_ELEMENTS 17592186044416

typedef struct {
	int64_t vocab_size;
	int64_t hidden_size;
	int64_t intermediate_size;
	int64_t num_layers;
	int64_t num_heads;
	int64_t num_kv_heads;    /* divides num_heads */
	int64_t head_dim;        /* 0: hidden_size / num_heads */
	float rms_eps;
	Dataflow_Rope_Scaling rope; /* theta and HF's rope_type (default, linear, llama3, yarn) */
	int tie_embeddings;      /* lm_head shares embed_tokens.weight */
	int qkv_bias;            /* q_proj, k_proj, v_proj have biases (Qwen2; attention_bias) */
	int o_bias;              /* o_proj has a bias (Llama / Qwen3 attention_bias) */
	int qk_norm;             /* RMSNorm over each head's q and k before RoPE (Qwen3 q_norm, k_norm) */
	int64_t sliding_window;  /* Mistral's: query i sees keys i - w < j <= i; 0: none */
	/* Mixture of experts (0 experts: the dense SwiGLU of intermediate_size). Every layer's
	 * feed-forward is then a router (mlp.gate, [num_experts, hidden]) choosing num_experts_per_tok
	 * of num_experts SwiGLU experts of moe_intermediate_size for each token, weighted by their
	 * softmax probabilities (renormalized over the chosen ones with norm_topk_prob), as HF's
	 * MixtralSparseMoeBlock and Qwen3MoeSparseMoeBlock; training adds router_aux_loss_coef times
	 * HF's load-balancing loss over all layers' router logits. mixtral_names: the experts carry
	 * Mixtral's checkpoint names (block_sparse_moe.experts.E.w1 / w3 / w2, block_sparse_moe.gate)
	 * rather than Qwen3-MoE's (mlp.experts.E.gate_proj / up_proj / down_proj, mlp.gate). */
	int64_t num_experts;
	int64_t num_experts_per_tok;
	int64_t moe_intermediate_size;
	int norm_topk_prob;
	float router_aux_loss_coef;
	int mixtral_names;
	DataflowDatatype dtype;  /* weights and activations: DATAFLOW_FP32 or DATAFLOW_BF16 */
	/* Weight-only quantization of the layers' linear weights (q, k, v, o, gate, up, down; the
	 * embedding, norms, biases and, unless quant_lm_head, lm_head stay in dtype), for inference
	 * only: 0 none, 8 (int8 per output channel, fp32 scales) or 4 (int4 codes in groups of
	 * quant_group_size along the input, 32..128 and a multiple of 32, fp32 scales, uint8 zero
	 * points when quant_zero_point, else the symmetric zero 8). The layouts are qmatmul_int8's
	 * and qmatmul_int4's (libdataflowops/catalogue.toml). */
	int quant_bits;
	int quant_group_size;
	int quant_zero_point;
	int quant_lm_head; /* lm_head quantized too (untied models with quant_bits only) */
} Dataflow_Llama_Config;

#endif
