/* The blocked Llama's definition: config checks, the blocks' layouts (tensor offsets), the
 * named-tensor table, block sizes, and the RoPE table every layer reads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blocked_internal.h"

static int64_t align_up(int64_t n)
{
	return (n + DATAFLOW_LLAMA_ALIGN - 1) / DATAFLOW_LLAMA_ALIGN * DATAFLOW_LLAMA_ALIGN;
}

/* A mixture-of-experts config: top-k of num_experts within the moe ops' bounds, the experts'
 * size, a finite aux coefficient; no quantization (its layouts are the dense linears'). */
static Dataflow_Status check_experts(const Dataflow_Llama_Config *c)
{
	if (!c->num_experts)
		return DATAFLOW_OK;
	if (c->num_experts < 0 || c->num_experts > DATAFLOW_MOE_MAX_EXPERTS)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama config: num_experts must be in [0, %d] (0: dense), got %lld",
					  DATAFLOW_MOE_MAX_EXPERTS, (long long)c->num_experts);
	if (c->num_experts_per_tok < 1 || c->num_experts_per_tok > c->num_experts ||
	    c->num_experts_per_tok > DATAFLOW_MOE_MAX_TOP_K)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama config: num_experts_per_tok must be in [1, min(num_experts = %lld, %d)], got "
					  "%lld",
					  (long long)c->num_experts, DATAFLOW_MOE_MAX_TOP_K, (long long)c->num_experts_per_tok);
	int64_t I = c->moe_intermediate_size;
	if (I <= 0 || I > ((int64_t)1 << 31) ||
	    c->num_experts * I > DATAFLOW_LLAMA_MAX_MATRIX_ELEMENTS / c->hidden_size)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama config: moe_intermediate_size must be in [1, 2^31] with num_experts x "
					  "moe_intermediate_size x hidden_size at most %lld elements, got %lld",
					  (long long)DATAFLOW_LLAMA_MAX_MATRIX_ELEMENTS, (long long)I);
	if (!(c->router_aux_loss_coef >= 0) || isinf(c->router_aux_loss_coef))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama config: router_aux_loss_coef must be finite and >= 0, got %g",
					  c->router_aux_loss_coef);
	if (c->quant_bits)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama config: quant_bits %d with num_experts %lld: quantized experts are not "
					  "supported",
					  c->quant_bits, (long long)c->num_experts);
	return DATAFLOW_OK;
}

static Dataflow_Status check_config(const Dataflow_Llama_Config *c)
{
	const struct {
		const char *name;
		int64_t value;
	} positive[] = {{"vocab_size", c->vocab_size},       {"hidden_size", c->hidden_size},
			{"intermediate_size", c->intermediate_size}, {"num_layers", c->num_layers},
			{"num_heads", c->num_heads},          {"num_kv_heads", c->num_kv_heads}};
	for (size_t i = 0; i < sizeof(positive) / sizeof(positive[0]); i++)
		if (positive[i].value <= 0 || positive[i].value > ((int64_t)1 << 31))
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "llama config: %s must be in [1, 2^31], got %lld", positive[i].name,
						  (long long)positive[i].value);
	if (c->num_layers > DATAFLOW_LLAMA_MAX_LAYERS)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama config: num_layers must be at most %d, got %lld",
					  DATAFLOW_LLAMA_MAX_LAYERS, (long long)c->num_layers);
	if (c->num_heads % c->num_kv_heads != 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama config: num_heads (%lld) must be a multiple of num_kv_heads (%lld)",
					  (long long)c->num_heads, (long long)c->num_kv_heads);
	int64_t hd = c->head_dim ? c->head_dim : c->hidden_size / c->num_heads;
	if (hd <= 0 || hd % 2 || hd > DATAFLOW_ATTENTION_MAX_HEAD_DIM)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama config: head_dim must be even and in [2, %d], got %lld",
					  DATAFLOW_ATTENTION_MAX_HEAD_DIM, (long long)hd);
	const struct {
		const char *name;
		int64_t rows, cols;
	} matrices[] = {{"vocab_size x hidden_size", c->vocab_size, c->hidden_size},
			{"intermediate_size x hidden_size", c->intermediate_size, c->hidden_size},
			{"num_heads x head_dim x hidden_size", c->num_heads * hd, c->hidden_size}};
	for (size_t i = 0; i < sizeof(matrices) / sizeof(matrices[0]); i++)
		if (matrices[i].rows > DATAFLOW_LLAMA_MAX_MATRIX_ELEMENTS / matrices[i].cols)
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "llama config: %s is %lld x %lld elements, more than a weight matrix may "
						  "hold (%lld)",
						  matrices[i].name, (long long)matrices[i].rows, (long long)matrices[i].cols,
						  (long long)DATAFLOW_LLAMA_MAX_MATRIX_ELEMENTS);
	if (!(c->rms_eps > 0))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama config: need rms_eps > 0, got %g",
					  c->rms_eps);
	float inv_freq[DATAFLOW_ATTENTION_MAX_HEAD_DIM / 2];
	if (dataflow_rope_inv_freq(hd, &c->rope, inv_freq, NULL) != DATAFLOW_OK) /* the one check of rope */
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama config: rope: %s", dataflow_last_error());
	if (c->sliding_window < 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama config: sliding_window must be >= 0 (0: none), got %lld",
					  (long long)c->sliding_window);
	if (c->dtype != DATAFLOW_FP32 && c->dtype != DATAFLOW_BF16)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama config: dtype must be fp32 or bf16, got %s",
					  dataflow_datatype_name(c->dtype));
	if (c->quant_bits != 0 && c->quant_bits != 8 && c->quant_bits != 4)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama config: quant_bits must be 0, 8 or 4, got %d",
					  c->quant_bits);
	if (c->quant_bits == 4 && (c->quant_group_size < 32 || c->quant_group_size > 128 || c->quant_group_size % 32))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama config: quant_group_size must be 32..128 and a multiple of 32 with "
					  "quant_bits 4, got %d",
					  c->quant_group_size);
	if (c->quant_lm_head && (!c->quant_bits || c->tie_embeddings))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama config: quant_lm_head needs quant_bits and an untied lm_head, got quant_bits "
					  "%d, tie_embeddings %d",
					  c->quant_bits, c->tie_embeddings);
	TRY(check_experts(c));
	if (c->quant_bits != 4 && (c->quant_group_size || c->quant_zero_point))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama config: quant_group_size and quant_zero_point are for quant_bits 4, got "
					  "quant_bits %d with group size %d, zero point %d",
					  c->quant_bits, c->quant_group_size, c->quant_zero_point);
	return DATAFLOW_OK;
}

static int64_t align64(int64_t bytes)
{
	return (bytes + 63) / 64 * 64;
}

Llama_Quant_Parts llama_quant_parts(const Dataflow_Llama_Config *c, int64_t rows, int64_t cols)
{
	Llama_Quant_Parts p = {0};
	int int4 = c->quant_bits == 4;
	p.groups = int4 ? (cols + c->quant_group_size - 1) / c->quant_group_size : 1;
	p.scales = align64(rows * (int4 ? (cols + 1) / 2 : cols));
	p.zeros = align64(p.scales + rows * p.groups * 4);
	p.bytes = p.zeros + (int4 && c->quant_zero_point ? rows * p.groups : 0);
	return p;
}

Dataflow_Status llama_refuse_quantized(const Dataflow_Llama_Config *c, const char *what)
{
	if (!c->quant_bits)
		return DATAFLOW_OK;
	return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
				  "llama %s: the model's linear weights are quantized (int%d), for inference only; "
				  "train the full-precision model and quantize it afterwards",
				  what, c->quant_bits);
}

/* rows and columns of layer tensor i's matrix ({0, 0}: a vector) */
static void layer_matrix(const Dataflow_Llama_Config *c, int i, int64_t shape[2])
{
	int64_t H = c->hidden_size, F = c->intermediate_size, qd = c->num_heads * c->head_dim;
	int64_t kvd = c->num_kv_heads * c->head_dim;
	int64_t I = c->moe_intermediate_size;
	/* the experts' stacks: one expert's matrix (the table's unit) */
	const int64_t shapes[LLAMA_PER_LAYER][2] = {[LLAMA_Q] = {qd, H},    [LLAMA_K] = {kvd, H}, [LLAMA_V] = {kvd, H},
						    [LLAMA_O] = {H, qd},    [LLAMA_GATE] = {F, H},
						    [LLAMA_UP] = {F, H},    [LLAMA_DOWN] = {H, F},
						    [LLAMA_ROUTER] = {c->num_experts, H},
						    [LLAMA_EGATE] = {I, H}, [LLAMA_EUP] = {I, H}, [LLAMA_EDOWN] = {H, I}};
	shape[0] = shapes[i][0];
	shape[1] = shapes[i][1];
}

static void add_typed_tensor(Dataflow_Blocked_Model *m, const char *name, DataflowDatatype dtype, int ndim, int64_t d0,
			     int64_t d1, int block, int64_t offset)
{
	Dataflow_Llama_Tensor *t = &m->tensors[m->num_tensors++];
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->ndim = ndim;
	t->shape[0] = d0;
	t->shape[1] = ndim == 2 ? d1 : 1;
	t->numel = d0 * t->shape[1];
	t->dtype = dtype;
	t->block = block;
	t->offset = offset;
	t->ptr = NULL;
}

static void add_tensor(Dataflow_Blocked_Model *m, const char *name, int ndim, int64_t d0, int64_t d1, int block,
		       int64_t offset)
{
	add_typed_tensor(m, name, m->config.dtype, ndim, d0, d1, block, offset);
}

/* A quantized linear weight's tables, at element `offset` (the model dtype's) of its block:
 * <name>.weight (int8 [rows, cols], or int4 codes as uint8 [rows, cdiv(cols, 2)]), <name>.scales
 * (fp32 [rows] or [rows, groups]) and, with zero points, <name>.zeros (uint8 [rows, groups]). */
static void add_quantized(Dataflow_Blocked_Model *m, const char *name, const int64_t shape[2], int block,
			  int64_t offset)
{
	const Dataflow_Llama_Config *c = &m->config;
	Llama_Quant_Parts p = llama_quant_parts(c, shape[0], shape[1]);
	int64_t es = llama_dtype_size(c->dtype), rows = shape[0];
	int int4 = c->quant_bits == 4;
	char full[DATAFLOW_LLAMA_NAME_MAX];
	const int base = DATAFLOW_LLAMA_NAME_MAX - 8; /* room for the longest suffix */
	snprintf(full, sizeof(full), "%.*s.weight", base, name);
	add_typed_tensor(m, full, int4 ? DATAFLOW_UINT8 : DATAFLOW_INT8, 2, rows, int4 ? (shape[1] + 1) / 2 : shape[1],
			 block, offset);
	snprintf(full, sizeof(full), "%.*s.scales", base, name);
	add_typed_tensor(m, full, DATAFLOW_FP32, int4 ? 2 : 1, rows, p.groups, block, offset + p.scales / es);
	if (int4 && c->quant_zero_point) {
		snprintf(full, sizeof(full), "%.*s.zeros", base, name);
		add_typed_tensor(m, full, DATAFLOW_UINT8, 2, rows, p.groups, block, offset + p.zeros / es);
	}
}

Dataflow_Status llama_define(Dataflow_Blocked_Model *m, const Dataflow_Llama_Config *config)
{
	TRY(check_config(config));
	m->config = *config;
	if (!m->config.head_dim)
		m->config.head_dim = config->hidden_size / config->num_heads;
	const Dataflow_Llama_Config *c = &m->config;
	int64_t H = c->hidden_size, F = c->intermediate_size, V = c->vocab_size, hd = c->head_dim;
	int64_t qd = c->num_heads * hd, kvd = c->num_kv_heads * hd;
	int64_t qkv_bias = c->qkv_bias != 0, o_bias = c->o_bias != 0, qk_norm = c->qk_norm != 0;
	int64_t E = c->num_experts, dense = E == 0, EI = E * c->moe_intermediate_size;
	const int64_t sizes[LLAMA_PER_LAYER] = {
		[LLAMA_Q] = qd * H,        [LLAMA_QB] = qkv_bias * qd, [LLAMA_K] = kvd * H,       [LLAMA_KB] = qkv_bias * kvd,
		[LLAMA_V] = kvd * H,       [LLAMA_VB] = qkv_bias * kvd, [LLAMA_O] = H * qd,       [LLAMA_OB] = o_bias * H,
		[LLAMA_QN] = qk_norm * hd, [LLAMA_KN] = qk_norm * hd,   [LLAMA_GATE] = dense * F * H,
		[LLAMA_UP] = dense * F * H, [LLAMA_DOWN] = dense * H * F, [LLAMA_ROUTER] = E * H,
		[LLAMA_EGATE] = EI * H,    [LLAMA_EUP] = EI * H,        [LLAMA_EDOWN] = H * EI,
		[LLAMA_LN1] = H,           [LLAMA_LN2] = H};
	m->layer_numel = 0;
	for (int i = 0; i < LLAMA_PER_LAYER; i++) {
		int64_t shape[2], es = llama_dtype_size(c->dtype);
		layer_matrix(c, i, shape);
		m->layer_offset[i] = m->layer_numel;
		/* a quantized weight's region: its parts' bytes in whole elements of the model dtype */
		m->layer_size[i] = llama_is_quantized(c, i) ? (llama_quant_parts(c, shape[0], shape[1]).bytes + es - 1) / es
							    : sizes[i];
		m->layer_numel += align_up(m->layer_size[i]);
	}
	m->embed_numel = align_up(V * H);
	m->norm_offset = 0;
	m->lm_head_offset = c->tie_embeddings ? -1 : align_up(H);
	int64_t lm_numel = c->quant_lm_head ? (llama_quant_parts(c, V, H).bytes + llama_dtype_size(c->dtype) - 1) /
						       llama_dtype_size(c->dtype)
					     : V * H;
	m->head_numel = align_up(H) + (c->tie_embeddings ? 0 : align_up(lm_numel));
	m->num_blocks = (int)c->num_layers + 2;
	return DATAFLOW_OK;
}

/* Each expert's slice of stack i (EGATE, EUP, EDOWN) of layer l, by the checkpoint names HF
 * writes (its save_pretrained reverts the fused gate_up_proj / down_proj it holds in memory). */
static void name_experts(Dataflow_Blocked_Model *m, int i, int64_t l, const int64_t shape[2])
{
	const Dataflow_Llama_Config *c = &m->config;
	static const char *qwen[] = {"gate_proj", "up_proj", "down_proj"}, *mixtral[] = {"w1", "w3", "w2"};
	int which = i - LLAMA_EGATE;
	for (int64_t e = 0; e < c->num_experts; e++) {
		char name[DATAFLOW_LLAMA_NAME_MAX];
		snprintf(name, sizeof(name), "model.layers.%lld.%s.experts.%lld.%s.weight", (long long)l,
			 c->mixtral_names ? "block_sparse_moe" : "mlp", (long long)e,
			 c->mixtral_names ? mixtral[which] : qwen[which]);
		add_tensor(m, name, 2, shape[0], shape[1], (int)(1 + l), m->layer_offset[i] + e * shape[0] * shape[1]);
	}
}

/* The named-tensor table, in HF named_parameters order (a layer's tensors in block order). */
static Dataflow_Status name_tensors(Dataflow_Blocked_Model *m)
{
	const Dataflow_Llama_Config *c = &m->config;
	int64_t H = c->hidden_size, V = c->vocab_size, L = c->num_layers;
	/* up to three tables per quantized weight; three per expert */
	m->tensors = calloc((size_t)((LLAMA_PER_LAYER + 14 + 3 * c->num_experts) * L + 5), sizeof(Dataflow_Llama_Tensor));
	if (!m->tensors)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "llama blocked model: host allocation failed");
	add_tensor(m, "model.embed_tokens.weight", 2, V, H, 0, 0);
	static const char *names[LLAMA_PER_LAYER] = {
		[LLAMA_Q] = "self_attn.q_proj.weight",    [LLAMA_QB] = "self_attn.q_proj.bias",
		[LLAMA_K] = "self_attn.k_proj.weight",    [LLAMA_KB] = "self_attn.k_proj.bias",
		[LLAMA_V] = "self_attn.v_proj.weight",    [LLAMA_VB] = "self_attn.v_proj.bias",
		[LLAMA_O] = "self_attn.o_proj.weight",    [LLAMA_OB] = "self_attn.o_proj.bias",
		[LLAMA_QN] = "self_attn.q_norm.weight",   [LLAMA_KN] = "self_attn.k_norm.weight",
		[LLAMA_GATE] = "mlp.gate_proj.weight",    [LLAMA_UP] = "mlp.up_proj.weight",
		[LLAMA_DOWN] = "mlp.down_proj.weight",    [LLAMA_ROUTER] = "mlp.gate.weight",
		[LLAMA_LN1] = "input_layernorm.weight",   [LLAMA_LN2] = "post_attention_layernorm.weight"};
	for (int64_t l = 0; l < L; l++)
		for (int i = 0; i < LLAMA_PER_LAYER; i++) {
			if (!m->layer_size[i])
				continue;
			char name[DATAFLOW_LLAMA_NAME_MAX];
			int64_t shape[2];
			layer_matrix(c, i, shape);
			if (i == LLAMA_EGATE || i == LLAMA_EUP || i == LLAMA_EDOWN) {
				name_experts(m, i, l, shape);
				continue;
			}
			snprintf(name, sizeof(name), "model.layers.%lld.%s", (long long)l, names[i]);
			if (i == LLAMA_ROUTER && c->mixtral_names)
				snprintf(name, sizeof(name), "model.layers.%lld.block_sparse_moe.gate.weight", (long long)l);
			if (llama_is_quantized(c, i)) {
				name[strlen(name) - strlen(".weight")] = 0;
				add_quantized(m, name, shape, (int)(1 + l), m->layer_offset[i]);
			} else if (shape[1])
				add_tensor(m, name, 2, shape[0], shape[1], (int)(1 + l), m->layer_offset[i]);
			else
				add_tensor(m, name, 1, m->layer_size[i], 1, (int)(1 + l), m->layer_offset[i]);
		}
	add_tensor(m, "model.norm.weight", 1, H, 1, (int)L + 1, m->norm_offset);
	if (c->quant_lm_head)
		add_quantized(m, "lm_head", (const int64_t[2]){V, H}, (int)L + 1, m->lm_head_offset);
	else if (!c->tie_embeddings)
		add_tensor(m, "lm_head.weight", 2, V, H, (int)L + 1, m->lm_head_offset);
	return DATAFLOW_OK;
}

static Dataflow_Status upload_rope_table(Dataflow_Blocked_Model *m)
{
	const Dataflow_Llama_Config *c = &m->config;
	Dataflow_Handle *h = m->handle;
	int64_t hd = c->head_dim;
	float inv_freq[DATAFLOW_ATTENTION_MAX_HEAD_DIM / 2];
	float attention_factor;
	TRY(dataflow_rope_inv_freq(hd, &c->rope, inv_freq, &attention_factor));
	/* HF multiplies cos and sin by the factor (yarn): q . k scales by its square */
	m->attn_scale = attention_factor * attention_factor / sqrtf((float)hd);
	TRY(dataflow_alloc_mem(h, (uint64_t)(hd / 2 * 4), (void **)&m->inv_freq));
	TRY(dataflow_submit_inbound_transfer(h, 0, m->inv_freq, inv_freq, (uint64_t)(hd / 2 * 4)));
	return dataflow_sync_stream(h, 0); /* inv_freq is a stack buffer */
}

/* Frees what a definition holds (the tensor table, the RoPE table once queued work is done). */
static void release(Dataflow_Blocked_Model *m)
{
	if (m->inv_freq) {
		dataflow_sync_handle(m->handle);
		dataflow_free_mem(m->handle, m->inv_freq);
	}
	free(m->tensors);
}

Dataflow_Status dataflow_llama_blocked_model_create(Dataflow_Handle *handle, const Dataflow_Llama_Config *config,
						    Dataflow_Blocked_Model **model)
{
	if (!handle || !config || !model)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama blocked model: handle, config and model are required");
	*model = NULL;
	Dataflow_Blocked_Model def = {.handle = handle};
	Dataflow_Status st = llama_define(&def, config);
	if (st == DATAFLOW_OK)
		st = name_tensors(&def);
	if (st == DATAFLOW_OK)
		st = upload_rope_table(&def);
	Dataflow_Blocked_Model *m = st == DATAFLOW_OK ? malloc(sizeof(*m)) : NULL;
	if (st == DATAFLOW_OK && !m)
		st = dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "llama blocked model: host allocation failed");
	if (m) {
		*m = def;
		*model = m;
	} else {
		release(&def);
	}
	return st;
}

void dataflow_blocked_model_destroy(Dataflow_Blocked_Model *m)
{
	if (m) {
		release(m);
		free(m);
	}
}

const Dataflow_Llama_Config *dataflow_blocked_model_config(const Dataflow_Blocked_Model *m)
{
	return m ? &m->config : NULL;
}

int dataflow_blocked_model_num_blocks(const Dataflow_Blocked_Model *m)
{
	return m ? m->num_blocks : 0;
}

int dataflow_blocked_model_num_tensors(const Dataflow_Blocked_Model *m)
{
	return m ? m->num_tensors : 0;
}

Dataflow_Status dataflow_blocked_model_tensor(const Dataflow_Blocked_Model *m, int index, Dataflow_Llama_Tensor *tensor)
{
	if (!m || !tensor)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "blocked model tensor: model and tensor are required");
	if (index < 0 || index >= m->num_tensors)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "blocked model tensor: index must be in [0, %d), got %d", m->num_tensors, index);
	*tensor = m->tensors[index];
	return DATAFLOW_OK;
}

Dataflow_Block_Role llama_block_role(const Dataflow_Blocked_Model *m, int block)
{
	return block == 0 ? DATAFLOW_BLOCK_EMBEDDING : block == m->num_blocks - 1 ? DATAFLOW_BLOCK_HEAD : DATAFLOW_BLOCK_LAYER;
}

int64_t llama_block_numel(const Dataflow_Blocked_Model *m, int block)
{
	switch (llama_block_role(m, block)) {
	case DATAFLOW_BLOCK_EMBEDDING: return m->embed_numel;
	case DATAFLOW_BLOCK_LAYER: return m->layer_numel;
	case DATAFLOW_BLOCK_HEAD: return m->head_numel;
	}
	return 0;
}

Dataflow_Status dataflow_blocked_model_block_sizes(const Dataflow_Blocked_Model *m, int block,
						   Dataflow_Block_Sizes *sizes)
{
	if (!m || !sizes)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "block sizes: model and sizes are required");
	if (block < 0 || block >= m->num_blocks)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "block sizes: block must be in [0, %d), got %d",
					  m->num_blocks, block);
	memset(sizes, 0, sizeof(*sizes));
	sizes->role = llama_block_role(m, block);
	sizes->numel = llama_block_numel(m, block);
	for (int k = 0; k < DATAFLOW_BLOCK_NUM_KINDS; k++)
		sizes->bytes[k] = sizes->numel * (k == DATAFLOW_BLOCK_PARAM ? llama_dtype_size(m->config.dtype) : 4);
	if (m->config.quant_bits) /* inference only: no gradients, optimizer state or master weights */
		memset(sizes->bytes + 1, 0, sizeof(sizes->bytes[0]) * (DATAFLOW_BLOCK_NUM_KINDS - 1));
	if (m->config.dtype == DATAFLOW_FP32)
		sizes->bytes[DATAFLOW_BLOCK_MASTER] = 0;
	llama_acts_per_token(m, sizes->role, sizes);
	return DATAFLOW_OK;
}
