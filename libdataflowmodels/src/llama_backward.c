/* The resident model's training pass: forward with the loss, then every block's backward_x and
 * backward_w from the head to the embedding (recomputing a layer's activations first when the
 * save level did not keep them). Gradients at block outputs alternate between two buffers,
 * because backward_w still reads a layer's dy after backward_x wrote its dx. */
#include <math.h>

#include "llama_internal.h"

Dataflow_Status dataflow_llama_loss_backward(Dataflow_Llama *m, int s, const Dataflow_Llama_Batch *b,
					     int accumulate_grads, float loss_scale)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama loss_backward: model is required");
	if (!(loss_scale > 0) || !isfinite(loss_scale))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama loss_backward: loss_scale must be finite and > 0 (1 / labelled tokens for a "
					  "mean loss), got %g",
					  loss_scale);
	TRY(llama_check_batch(m, b, 1));
	TRY(llama_workspace_reserve(m, b->num_tokens));
	if (!accumulate_grads)
		TRY(dataflow_llama_zero_grads(m, s));
	TRY(llama_forward_pass(m, s, b, NULL, NULL, 0, loss_scale));

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
		TRY(dataflow_block_recompute(bm, block, s, mem, &a));
		TRY(dataflow_block_backward_x(bm, block, s, mem, &a));
		TRY(dataflow_block_backward_w(bm, block, s, mem, &a));
	}
	return DATAFLOW_OK;
}
