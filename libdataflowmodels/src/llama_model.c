/* The all-resident Llama: every block's memory allocated on the model's handle (weights,
 * gradients, and AdamW m, v and fp32 master weights when asked for), plus the named-tensor
 * views into it. */
#include <stdlib.h>
#include <string.h>

#include "llama_internal.h"

static Dataflow_Status alloc_zeroed(Dataflow_Handle *h, int stream, int64_t bytes, void **ptr)
{
	TRY(dataflow_alloc_mem(h, (uint64_t)bytes, ptr));
	Dataflow_Status st = dataflow_set_mem(h, stream, *ptr, 0, (uint64_t)bytes);
	if (st != DATAFLOW_OK) {
		dataflow_free_mem(h, *ptr);
		*ptr = NULL;
	}
	return st;
}

static Dataflow_Status build(Dataflow_Llama *m)
{
	Dataflow_Handle *h = m->handle;
	m->num_blocks = dataflow_blocked_model_num_blocks(m->bm);
	m->blocks = calloc((size_t)m->num_blocks, sizeof(Dataflow_Block_Memory));
	if (!m->blocks)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "llama create: host allocation failed");
	for (int b = 0; b < m->num_blocks; b++) {
		int64_t n = llama_block_numel(m->bm, b);
		TRY(alloc_zeroed(h, 0, n * llama_dtype_size(m->config->dtype), &m->blocks[b].param));
		if (!m->config->quant_bits) /* a quantized model is for inference: no gradients */
			TRY(alloc_zeroed(h, 0, n * 4, (void **)&m->blocks[b].grad));
	}
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_create(Dataflow_Handle *handle, const Dataflow_Llama_Config *config,
				      Dataflow_Llama **model)
{
	if (!handle || !config || !model)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama create: handle, config and model are required");
	*model = NULL;
	Dataflow_Llama *m = calloc(1, sizeof(*m));
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "llama create: host allocation failed");
	m->handle = handle;
	Dataflow_Status st = dataflow_llama_blocked_model_create(handle, config, &m->bm);
	if (st == DATAFLOW_OK) {
		m->config = dataflow_blocked_model_config(m->bm);
		st = build(m);
	}
	if (st == DATAFLOW_OK)
		*model = m;
	else
		dataflow_llama_destroy(m);
	return st;
}

void dataflow_llama_destroy(Dataflow_Llama *m)
{
	if (!m)
		return;
	Dataflow_Handle *h = m->handle;
	dataflow_sync_handle(h);
	llama_workspace_free(m);
	for (int b = 0; m->blocks && b < m->num_blocks; b++) {
		Dataflow_Block_Memory *blk = &m->blocks[b];
		void *ptrs[] = {blk->param, blk->grad, blk->m, blk->v, blk->master};
		for (int i = 0; i < 5; i++)
			if (ptrs[i])
				dataflow_free_mem(h, ptrs[i]);
	}
	dataflow_blocked_model_destroy(m->bm);
	free(m->blocks);
	free(m->state_numel);
	free(m);
}

const Dataflow_Llama_Config *dataflow_llama_config(const Dataflow_Llama *model)
{
	return model ? model->config : NULL;
}

const Dataflow_Blocked_Model *dataflow_llama_blocked_model(const Dataflow_Llama *model)
{
	return model ? model->bm : NULL;
}

int dataflow_llama_num_tensors(const Dataflow_Llama *model)
{
	return model ? dataflow_blocked_model_num_tensors(model->bm) : 0;
}

int dataflow_llama_num_blocks(const Dataflow_Llama *model)
{
	return model ? model->num_blocks : 0;
}

static void *block_ptr(const Dataflow_Block_Memory *b, Dataflow_Block_Kind kind)
{
	switch (kind) {
	case DATAFLOW_BLOCK_PARAM: return b->param;
	case DATAFLOW_BLOCK_GRAD: return b->grad;
	case DATAFLOW_BLOCK_ADAM_M: return b->m;
	case DATAFLOW_BLOCK_ADAM_V: return b->v;
	case DATAFLOW_BLOCK_MASTER: return b->master;
	case DATAFLOW_BLOCK_NUM_KINDS: break;
	}
	return NULL;
}

Dataflow_Status dataflow_llama_tensor(const Dataflow_Llama *model, int index, Dataflow_Block_Kind kind,
				      Dataflow_Llama_Tensor *tensor)
{
	if (!model || !tensor)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama tensor: model and tensor are required");
	if ((int)kind < 0 || kind >= DATAFLOW_BLOCK_NUM_KINDS)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama tensor: kind must be 0..4 (param, grad, m, v, master), got %d", (int)kind);
	TRY(dataflow_blocked_model_tensor(model->bm, index, tensor));
	void *base = block_ptr(&model->blocks[tensor->block], kind);
	if (base && model->state_numel && kind != DATAFLOW_BLOCK_PARAM && kind != DATAFLOW_BLOCK_GRAD)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama tensor: the optimizer state (kind %d) is sharded over the ranks; "
					  "dataflow_ring_shard_optimizer_state(..., 0) gathers it",
					  (int)kind);
	if (kind != DATAFLOW_BLOCK_PARAM) /* a weight keeps the table's dtype (quantized codes, scales) */
		tensor->dtype = DATAFLOW_FP32;
	/* offsets count elements of the kind's dtype: the model's for the weights, fp32 for the rest */
	DataflowDatatype unit = kind == DATAFLOW_BLOCK_PARAM ? model->config->dtype : DATAFLOW_FP32;
	tensor->ptr = base ? llama_at(base, tensor->offset, unit) : NULL;
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_block(const Dataflow_Llama *model, int block, Dataflow_Block_Memory *memory)
{
	if (!model || !memory)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama block: model and memory are required");
	if (block < 0 || block >= model->num_blocks)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama block: block must be in [0, %d), got %d",
					  model->num_blocks, block);
	*memory = model->blocks[block];
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_enable_master_weights(Dataflow_Llama *m, int stream)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama enable_master_weights: model is required");
	TRY(llama_refuse_quantized(m->config, "enable_master_weights"));
	if (m->config->dtype != DATAFLOW_BF16)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama enable_master_weights: master weights are for bf16 models; this one is %s",
					  dataflow_datatype_name(m->config->dtype));
	if (m->state_numel)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama enable_master_weights: the optimizer state is sharded; enable master weights "
					  "before dataflow_ring_shard_optimizer_state");
	for (int b = 0; b < m->num_blocks; b++) {
		Dataflow_Block_Memory *blk = &m->blocks[b];
		if (blk->master)
			continue;
		int64_t n = llama_block_numel(m->bm, b);
		TRY(dataflow_alloc_mem(m->handle, (uint64_t)n * 4, (void **)&blk->master));
		TRY(dataflow_submit_cast(m->handle, stream, DATAFLOW_BF16, DATAFLOW_FP32, n, blk->param, blk->master));
	}
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_alloc_optimizer_state(Dataflow_Llama *m, int s)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama alloc_optimizer_state: model is required");
	TRY(llama_refuse_quantized(m->config, "alloc_optimizer_state"));
	for (int b = 0; b < m->num_blocks; b++) {
		Dataflow_Block_Memory *blk = &m->blocks[b];
		int64_t bytes = (m->state_numel ? m->state_numel[b] : llama_block_numel(m->bm, b)) * 4;
		float **state[] = {&blk->m, &blk->v};
		for (int i = 0; i < 2; i++)
			if (!*state[i])
				TRY(alloc_zeroed(m->handle, s, bytes, (void **)state[i]));
	}
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_set_optimizer_state(Dataflow_Llama *m, const Dataflow_Block_Memory *blocks,
						   const int64_t *state_numel)
{
	if (!m || !blocks)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama set_optimizer_state: model and blocks are required");
	TRY(llama_refuse_quantized(m->config, "set_optimizer_state"));
	int64_t *numel = NULL;
	if (state_numel) {
		if (!(numel = malloc((size_t)m->num_blocks * sizeof(*numel))))
			return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
						  "llama set_optimizer_state: host allocation failed");
		memcpy(numel, state_numel, (size_t)m->num_blocks * sizeof(*numel));
	}
	for (int b = 0; b < m->num_blocks; b++) {
		m->blocks[b].m = blocks[b].m;
		m->blocks[b].v = blocks[b].v;
		m->blocks[b].master = blocks[b].master;
	}
	free(m->state_numel);
	m->state_numel = numel;
	return DATAFLOW_OK;
}
