/* Llama model: config checks, the per-layer contiguous blocks and the named-tensor table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_internal.h"

static int64_t align_up(int64_t n)
{
	return (n + DATAFLOW_LLAMA_ALIGN - 1) / DATAFLOW_LLAMA_ALIGN * DATAFLOW_LLAMA_ALIGN;
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
	if (c->num_heads % c->num_kv_heads != 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama config: num_heads (%lld) must be a multiple of num_kv_heads (%lld)",
					  (long long)c->num_heads, (long long)c->num_kv_heads);
	int64_t hd = c->head_dim ? c->head_dim : c->hidden_size / c->num_heads;
	if (hd <= 0 || hd % 2 || hd > DATAFLOW_ATTENTION_MAX_HEAD_DIM)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama config: head_dim must be even and in [2, %d], got %lld",
					  DATAFLOW_ATTENTION_MAX_HEAD_DIM, (long long)hd);
	if (!(c->rms_eps > 0) || !(c->rope_theta > 0) || !(c->rope_factor >= 0) || !isfinite(c->rope_factor))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama config: need rms_eps > 0, rope_theta > 0, rope_factor >= 0; got %g, %g, %g",
					  c->rms_eps, c->rope_theta, c->rope_factor);
	if (c->rope_factor > 0 && !(c->rope_high_freq_factor > c->rope_low_freq_factor &&
				    c->rope_low_freq_factor > 0 && c->rope_original_max_position > 0))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama config: llama3 rope scaling needs high_freq_factor > low_freq_factor > 0 "
					  "and original_max_position > 0, got %g, %g, %g",
					  c->rope_high_freq_factor, c->rope_low_freq_factor, c->rope_original_max_position);
	if (c->dtype != DATAFLOW_FP32 && c->dtype != DATAFLOW_BF16)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama config: dtype must be fp32 or bf16, got %s",
					  dataflow_datatype_name(c->dtype));
	return DATAFLOW_OK;
}

static void add_tensor(Dataflow_Llama *m, const char *name, int ndim, int64_t d0, int64_t d1, int block,
		       int64_t offset)
{
	Dataflow_Llama_Tensor *t = &m->tensors[m->num_tensors++];
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->ndim = ndim;
	t->shape[0] = d0;
	t->shape[1] = ndim == 2 ? d1 : 1;
	t->numel = d0 * t->shape[1];
	t->dtype = m->config.dtype;
	t->block = block;
	t->offset = offset;
	t->ptr = NULL;
}

static Dataflow_Status alloc_zeroed(Dataflow_Handle *h, int64_t bytes, void **ptr)
{
	TRY(dataflow_alloc_mem(h, (uint64_t)bytes, ptr));
	Dataflow_Status st = dataflow_set_mem(h, 0, *ptr, 0, (uint64_t)bytes);
	if (st != DATAFLOW_OK) {
		dataflow_free_mem(h, *ptr);
		*ptr = NULL;
	}
	return st;
}

static Dataflow_Status build(Dataflow_Llama *m)
{
	Dataflow_Handle *h = m->handle;
	const Dataflow_Llama_Config *c = &m->config;
	int64_t H = c->hidden_size, F = c->intermediate_size, V = c->vocab_size, hd = c->head_dim;
	int64_t qd = c->num_heads * hd, kvd = c->num_kv_heads * hd;
	int64_t L = c->num_layers;

	/* layer layout, HF named_parameters order */
	const int64_t sizes[LLAMA_PER_LAYER] = {qd * H, kvd * H, kvd * H, H * qd, F * H, F * H, H * F, H, H};
	int64_t layer_numel = 0;
	for (int i = 0; i < LLAMA_PER_LAYER; i++) {
		m->layer_offset[i] = layer_numel;
		layer_numel += align_up(sizes[i]);
	}
	m->norm_offset = 0;
	m->lm_head_offset = c->tie_embeddings ? -1 : align_up(H);
	int64_t head_numel = align_up(H) + (c->tie_embeddings ? 0 : align_up(V * H));

	m->num_blocks = (int)L + 2;
	m->blocks = calloc((size_t)m->num_blocks, sizeof(Llama_Block));
	m->tensors = calloc((size_t)(9 * L + 3), sizeof(Dataflow_Llama_Tensor));
	if (!m->blocks || !m->tensors)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "llama create: host allocation failed");
	m->blocks[0].numel = align_up(V * H);
	for (int64_t l = 0; l < L; l++)
		m->blocks[1 + l].numel = layer_numel;
	m->blocks[L + 1].numel = head_numel;

	add_tensor(m, "model.embed_tokens.weight", 2, V, H, 0, 0);
	static const char *names[LLAMA_PER_LAYER] = {
		"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
		"mlp.up_proj",      "mlp.down_proj",    "input_layernorm",  "post_attention_layernorm"};
	const int64_t shapes[LLAMA_PER_LAYER][2] = {{qd, H}, {kvd, H}, {kvd, H}, {H, qd}, {F, H},
						    {F, H},  {H, F},   {H, 1},   {H, 1}};
	for (int64_t l = 0; l < L; l++)
		for (int i = 0; i < LLAMA_PER_LAYER; i++) {
			char name[DATAFLOW_LLAMA_NAME_MAX];
			snprintf(name, sizeof(name), "model.layers.%lld.%s.weight", (long long)l, names[i]);
			add_tensor(m, name, i >= LLAMA_LN1 ? 1 : 2, shapes[i][0], shapes[i][1], (int)(1 + l),
				   m->layer_offset[i]);
		}
	add_tensor(m, "model.norm.weight", 1, H, 1, (int)L + 1, m->norm_offset);
	if (!c->tie_embeddings)
		add_tensor(m, "lm_head.weight", 2, V, H, (int)L + 1, m->lm_head_offset);

	int64_t largest = 0;
	for (int b = 0; b < m->num_blocks; b++) {
		Llama_Block *blk = &m->blocks[b];
		TRY(alloc_zeroed(h, blk->numel * llama_dtype_size(c->dtype), &blk->param));
		TRY(alloc_zeroed(h, blk->numel * 4, (void **)&blk->grad));
		if (blk->numel > largest)
			largest = blk->numel;
	}
	TRY(dataflow_alloc_mem(h, dataflow_grad_norm_sq_workspace_bytes(largest), &m->gn_ws));
	TRY(alloc_zeroed(h, 64, &m->scalars));

	float inv_freq[DATAFLOW_ATTENTION_MAX_HEAD_DIM / 2];
	TRY(dataflow_rope_inv_freq(hd, c->rope_theta, c->rope_factor, c->rope_low_freq_factor,
				   c->rope_high_freq_factor, c->rope_original_max_position, inv_freq));
	TRY(dataflow_alloc_mem(h, (uint64_t)(hd / 2 * 4), (void **)&m->inv_freq));
	TRY(dataflow_submit_inbound_transfer(h, 0, m->inv_freq, inv_freq, (uint64_t)(hd / 2 * 4)));
	return dataflow_sync_stream(h, 0); /* inv_freq is a stack buffer */
}

Dataflow_Status dataflow_llama_create(Dataflow_Handle *handle, const Dataflow_Llama_Config *config,
				      Dataflow_Llama **model)
{
	if (!handle || !config || !model)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama create: handle, config and model are required");
	*model = NULL;
	TRY(check_config(config));
	Dataflow_Llama *m = calloc(1, sizeof(*m));
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "llama create: host allocation failed");
	m->handle = handle;
	m->config = *config;
	if (!m->config.head_dim)
		m->config.head_dim = config->hidden_size / config->num_heads;
	Dataflow_Status st = build(m);
	if (st != DATAFLOW_OK) {
		dataflow_llama_destroy(m);
		return st;
	}
	*model = m;
	return DATAFLOW_OK;
}

void dataflow_llama_destroy(Dataflow_Llama *m)
{
	if (!m)
		return;
	Dataflow_Handle *h = m->handle;
	dataflow_sync_handle(h);
	llama_workspace_free(m);
	for (int b = 0; m->blocks && b < m->num_blocks; b++) {
		void *ptrs[] = {m->blocks[b].param, m->blocks[b].grad, m->blocks[b].m, m->blocks[b].v};
		for (int i = 0; i < 4; i++)
			if (ptrs[i])
				dataflow_free_mem(h, ptrs[i]);
	}
	void *rest[] = {m->gn_ws, m->scalars, m->inv_freq};
	for (int i = 0; i < 3; i++)
		if (rest[i])
			dataflow_free_mem(h, rest[i]);
	free(m->blocks);
	free(m->tensors);
	free(m);
}

const Dataflow_Llama_Config *dataflow_llama_config(const Dataflow_Llama *model)
{
	return model ? &model->config : NULL;
}

int dataflow_llama_num_tensors(const Dataflow_Llama *model)
{
	return model ? model->num_tensors : 0;
}

int dataflow_llama_num_blocks(const Dataflow_Llama *model)
{
	return model ? model->num_blocks : 0;
}

static void *block_ptr(const Llama_Block *b, Dataflow_Llama_Kind kind)
{
	switch (kind) {
	case DATAFLOW_LLAMA_PARAM: return b->param;
	case DATAFLOW_LLAMA_GRAD: return b->grad;
	case DATAFLOW_LLAMA_ADAM_M: return b->m;
	case DATAFLOW_LLAMA_ADAM_V: return b->v;
	}
	return NULL;
}

static Dataflow_Status check_kind(const char *what, Dataflow_Llama_Kind kind)
{
	if ((int)kind < 0 || kind > DATAFLOW_LLAMA_ADAM_V)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: kind must be 0..3 (param, grad, m, v), got %d",
					  what, (int)kind);
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_tensor(const Dataflow_Llama *model, int index, Dataflow_Llama_Kind kind,
				      Dataflow_Llama_Tensor *tensor)
{
	if (!model || !tensor)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama tensor: model and tensor are required");
	if (index < 0 || index >= model->num_tensors)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama tensor: index must be in [0, %d), got %d",
					  model->num_tensors, index);
	TRY(check_kind("llama tensor", kind));
	*tensor = model->tensors[index];
	void *base = block_ptr(&model->blocks[tensor->block], kind);
	tensor->dtype = kind == DATAFLOW_LLAMA_PARAM ? model->config.dtype : DATAFLOW_FP32;
	tensor->ptr = base ? llama_at(base, tensor->offset, tensor->dtype) : NULL;
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_block(const Dataflow_Llama *model, int block, Dataflow_Llama_Kind kind, void **ptr,
				     int64_t *numel, DataflowDatatype *dtype)
{
	if (!model)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama block: model is required");
	if (block < 0 || block >= model->num_blocks)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama block: block must be in [0, %d), got %d",
					  model->num_blocks, block);
	TRY(check_kind("llama block", kind));
	if (ptr)
		*ptr = block_ptr(&model->blocks[block], kind);
	if (numel)
		*numel = model->blocks[block].numel;
	if (dtype)
		*dtype = kind == DATAFLOW_LLAMA_PARAM ? model->config.dtype : DATAFLOW_FP32;
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_set_recompute(Dataflow_Llama *model, int recompute)
{
	if (!model)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama set_recompute: model is required");
	model->recompute = recompute != 0;
	return DATAFLOW_OK;
}
