/* The resident model's training pass: forward with the loss, then every block's backward_x and
 * backward_w from the head to the embedding (recomputing a layer's activations first when the
 * save level did not keep them). Gradients at block outputs alternate between two buffers,
 * because backward_w still reads a layer's dy after backward_x wrote its dx. Data-parallel,
 * each block's gradients go to the communication stream as soon as its backward is queued. */
#include <math.h>

#include "llama_internal.h"

/* `waiter` waits for the work queued so far on `stream`. */
static Dataflow_Status wait_for(Dataflow_Handle *h, int waiter, int stream)
{
	Dataflow_Stream_State state;
	TRY(dataflow_get_stream_state(h, stream, &state));
	return dataflow_submit_dependency(h, waiter, &state);
}

/* Block `block`'s gradients, complete on stream s, summed over the ranks on the comm stream. */
static Dataflow_Status sum_over_ranks(Dataflow_Llama *m, int s, int block)
{
	int cs = m->grad_comm_stream;
	if (cs != s)
		TRY(wait_for(m->handle, cs, s));
	int64_t n = llama_block_numel(m->bm, block);
	Dataflow_Trace_Span *span;
	TRY(llama_span_begin(m, cs, DATAFLOW_LLAMA_WORK_ALL_REDUCE, block, (uint64_t)n * sizeof(float), &span));
	float *g = m->blocks[block].grad;
	TRY(dataflow_submit_all_reduce(m->grad_comm, cs, DATAFLOW_FP32, n, g, g, DATAFLOW_REDUCE_SUM));
	return llama_span_end(m, span);
}

Dataflow_Status dataflow_llama_loss_backward(Dataflow_Llama *m, int s, const Dataflow_Llama_Batch *b,
					     int accumulate_grads, float loss_scale)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama loss_backward: model is required");
	TRY(llama_refuse_quantized(m->config, "loss_backward"));
	if (!(loss_scale > 0) || !isfinite(loss_scale))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama loss_backward: loss_scale must be finite and > 0 (1 / labelled tokens for a "
					  "mean loss), got %g",
					  loss_scale);
	if (m->shard_optimizer)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, LLAMA_SHARDED_TRAINING, "loss_backward");
	if (m->grad_comm && accumulate_grads)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama loss_backward: accumulate_grads must be 0 with a gradient communicator "
					  "(the gradients are summed over ranks at every call)");
	TRY(llama_check_batch(m, b, 1));
	TRY(llama_workspace_reserve(m, b->num_tokens));
	if (!accumulate_grads)
		TRY(dataflow_llama_zero_grads(m, s));
	TRY(llama_forward_pass(m, s, b, NULL, NULL, NULL, 0, loss_scale));

	const Dataflow_Blocked_Model *bm = m->bm;
	int which = 0; /* dres[which] receives the gradient at the next block's output */
	for (int block = m->num_blocks - 1; block >= 0; block--) {
		Dataflow_Block_Args a = llama_block_args(m, b, block);
		a.dy = m->ws.dres[which];
		a.dx = m->ws.dres[!which];
		if (block == m->num_blocks - 1)
			a.dx = m->ws.dres[which]; /* the head has no dy */
		else
			which = !which;
		const Dataflow_Block_Memory *mem = &m->blocks[block];
		Dataflow_Trace_Span *span;
		TRY(llama_span_begin(m, s, DATAFLOW_LLAMA_WORK_BACKWARD, block, 0, &span));
		TRY(dataflow_block_recompute(bm, block, s, mem, &a));
		TRY(dataflow_block_backward_x(bm, block, s, mem, &a));
		TRY(dataflow_block_backward_w(bm, block, s, mem, &a));
		TRY(llama_span_end(m, span));
		if (m->grad_comm)
			TRY(sum_over_ranks(m, s, block));
	}
	if (m->grad_comm && m->grad_comm_stream != s)
		TRY(wait_for(m->handle, s, m->grad_comm_stream));
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_set_grad_comm(Dataflow_Llama *m, Dataflow_Comm *comm, int comm_stream)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama set_grad_comm: model is required");
	TRY(llama_refuse_quantized(m->config, "set_grad_comm"));
	if (m->shard_optimizer)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama set_grad_comm: the optimizer state is sharded over the current communicator's "
					  "ranks; unshard it first (dataflow_llama_shard_optimizer(model, stream, 0))");
	if (comm && (comm_stream < 0 || comm_stream >= dataflow_handle_num_streams(m->handle)))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama set_grad_comm: comm_stream %d out of range [0, %d)",
					  comm_stream, dataflow_handle_num_streams(m->handle));
	m->grad_comm = comm;
	m->grad_comm_stream = comm_stream;
	return DATAFLOW_OK;
}
