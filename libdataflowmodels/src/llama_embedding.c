/* The Llama embedding block: y = embed_tokens.weight[tokens] ; backward_w: gW[tokens] += dy. */
#include "blocked_internal.h"

Dataflow_Status llama_embedding_forward(const Dataflow_Blocked_Model *m, int s, const Dataflow_Block_Memory *mem,
					const Dataflow_Block_Args *a)
{
	const Dataflow_Llama_Config *c = &m->config;
	return dataflow_submit_embedding(m->handle, s, DATAFLOW_INT32, c->dtype, a->batch->num_tokens, c->hidden_size,
					 c->vocab_size, a->batch->tokens, mem->param, a->y);
}

Dataflow_Status llama_embedding_backward_w(const Dataflow_Blocked_Model *m, int s, const Dataflow_Block_Memory *mem,
					   const Dataflow_Block_Args *a)
{
	const Dataflow_Llama_Config *c = &m->config;
	return dataflow_submit_embedding_bwd_w(m->handle, s, DATAFLOW_INT32, c->dtype, DATAFLOW_FP32, a->batch->num_tokens,
					       c->hidden_size, c->vocab_size, a->batch->tokens, a->dy, mem->grad);
}
