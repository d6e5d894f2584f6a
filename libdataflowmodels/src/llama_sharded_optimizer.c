/* ZeRO-1: the optimizer state (m, v, fp32 master weights) sharded over the ranks of the gradient
 * communicator. Block b's n elements split into N equal parts of q = n / N (rank r owns
 * [r q, (r + 1) q)) and a tail [N q, n) of fewer than N elements that every rank updates alike;
 * a rank's state of the block is [its part | the tail], q + n - N q elements.
 *
 * Backward: each block's gradients are reduce-scattered in place (rank r receives its part
 * summed in rank order: the bits an all-reduce gives) and the tail all-reduced. Step: the
 * squared norm of each rank's parts (and the tail, counted on rank 0) summed over the ranks,
 * AdamW on the part and the tail, then the parts of the weights all-gathered. */
#include "llama_internal.h"

typedef struct {
	int64_t part;      /* q: elements each rank owns */
	int64_t own;       /* r q: where this rank's part starts */
	int64_t tail;      /* N q: where the tail starts */
	int64_t tail_len;  /* n - N q */
} Shard;

static Shard shard_of(const Dataflow_Llama *m, int block)
{
	int64_t n = llama_block_numel(m->bm, block), ranks = dataflow_comm_size(m->grad_comm);
	int64_t q = n / ranks;
	return (Shard){q, dataflow_comm_rank(m->grad_comm) * q, ranks * q, n - ranks * q};
}

int64_t llama_optimizer_state_numel(const Dataflow_Llama *m, int block)
{
	if (!m->shard_optimizer)
		return llama_block_numel(m->bm, block);
	Shard sh = shard_of(m, block);
	return sh.part + sh.tail_len;
}

static Dataflow_Status copy_floats(Dataflow_Handle *h, int s, float *dst, const float *src, int64_t n)
{
	return n > 0 ? dataflow_submit_peer_transfer(h, s, dst, src, (uint64_t)n * 4) : DATAFLOW_OK;
}

/* One block's fp32 state between the layouts: full -> [part | tail], or back (all ranks). */
static Dataflow_Status convert(Dataflow_Llama *m, int s, int block, float **state, int shard)
{
	Shard sh = shard_of(m, block);
	int64_t n = shard ? sh.part + sh.tail_len : llama_block_numel(m->bm, block);
	float *from = *state, *to = NULL;
	TRY(dataflow_alloc_mem(m->handle, (uint64_t)n * 4, (void **)&to));
	Dataflow_Status st;
	if (shard) {
		st = copy_floats(m->handle, s, to, from + sh.own, sh.part);
		if (st == DATAFLOW_OK)
			st = copy_floats(m->handle, s, to + sh.part, from + sh.tail, sh.tail_len);
	} else {
		st = sh.part > 0 ? dataflow_submit_all_gather(m->grad_comm, s, DATAFLOW_FP32, sh.part, from, to)
				 : DATAFLOW_OK;
		if (st == DATAFLOW_OK)
			st = copy_floats(m->handle, s, to + sh.tail, from + sh.part, sh.tail_len);
	}
	if (st != DATAFLOW_OK) {
		dataflow_free_mem(m->handle, to);
		return st;
	}
	*state = to;
	return dataflow_free_mem(m->handle, from); /* stream-ordered: after the copies */
}

Dataflow_Status dataflow_llama_shard_optimizer(Dataflow_Llama *m, int s, int shard)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama shard_optimizer: model is required");
	TRY(llama_refuse_quantized(m->config, "shard_optimizer"));
	if (shard && !m->grad_comm)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama shard_optimizer: the state is sharded over the ranks of the gradient "
					  "communicator; set one first (dataflow_llama_set_grad_comm)");
	if (!shard == !m->shard_optimizer)
		return DATAFLOW_OK;
	for (int b = 0; b < m->num_blocks; b++) {
		Dataflow_Block_Memory *blk = &m->blocks[b];
		float **state[] = {&blk->m, &blk->v, &blk->master};
		for (int i = 0; i < 3; i++)
			if (*state[i])
				TRY(convert(m, s, b, state[i], shard));
	}
	m->shard_optimizer = shard != 0;
	return DATAFLOW_OK;
}

Dataflow_Status llama_shard_reduce_grads(Dataflow_Llama *m, int cs, int block)
{
	Shard sh = shard_of(m, block);
	float *g = m->blocks[block].grad;
	if (sh.part > 0)
		TRY(dataflow_submit_reduce_scatter(m->grad_comm, cs, DATAFLOW_FP32, sh.part, g, g + sh.own,
						   DATAFLOW_REDUCE_SUM));
	if (sh.tail_len > 0)
		TRY(dataflow_submit_all_reduce(m->grad_comm, cs, DATAFLOW_FP32, sh.tail_len, g + sh.tail, g + sh.tail,
					       DATAFLOW_REDUCE_SUM));
	return DATAFLOW_OK;
}

/* AdamW over n elements starting at element `at` of the block and `state_at` of its state. */
static Dataflow_Status adamw_range(Dataflow_Llama *m, int s, int block, int64_t at, int64_t state_at, int64_t n,
				   const Dataflow_AdamW_Params *p, const float *clip_scale, int64_t step)
{
	if (n == 0)
		return DATAFLOW_OK;
	const Dataflow_Block_Memory *blk = &m->blocks[block];
	DataflowDatatype d = m->config->dtype;
	return dataflow_submit_adamw_step(m->handle, s, d, DATAFLOW_FP32, n, llama_at(blk->param, at, d), blk->grad + at,
					  blk->m + state_at, blk->v + state_at, blk->master ? blk->master + state_at : NULL,
					  clip_scale, p->lr, p->beta1, p->beta2, p->eps, p->weight_decay, step);
}

Dataflow_Status llama_sharded_adamw_step(Dataflow_Llama *m, int s, const Dataflow_AdamW_Params *p,
					 double max_grad_norm, int64_t step)
{
	double *sumsq = (double *)m->scalars;
	float *scale = (float *)((char *)m->scalars + 8), *norm = (float *)((char *)m->scalars + 12);
	int clip = max_grad_norm > 0, lead = dataflow_comm_rank(m->grad_comm) == 0;
	TRY(dataflow_set_mem(m->handle, s, sumsq, 0, 8));
	for (int b = 0; b < m->num_blocks; b++) {
		Shard sh = shard_of(m, b);
		const float *g = m->blocks[b].grad;
		if (sh.part > 0)
			TRY(dataflow_submit_grad_norm_sq(m->handle, s, DATAFLOW_FP32, DATAFLOW_FP64, sh.part, g + sh.own,
							 m->opt_ws, sumsq, 1));
		if (lead && sh.tail_len > 0)
			TRY(dataflow_submit_grad_norm_sq(m->handle, s, DATAFLOW_FP32, DATAFLOW_FP64, sh.tail_len, g + sh.tail,
							 m->opt_ws, sumsq, 1));
	}
	TRY(dataflow_submit_all_reduce(m->grad_comm, s, DATAFLOW_FP64, 1, sumsq, sumsq, DATAFLOW_REDUCE_SUM));
	TRY(dataflow_submit_clip_by_global_norm(m->handle, s, DATAFLOW_FP64, sumsq, clip ? max_grad_norm : 1e30, scale,
						norm));
	DataflowDatatype d = m->config->dtype;
	for (int b = 0; b < m->num_blocks; b++) {
		Shard sh = shard_of(m, b);
		TRY(adamw_range(m, s, b, sh.own, 0, sh.part, p, clip ? scale : NULL, step));
		TRY(adamw_range(m, s, b, sh.tail, sh.part, sh.tail_len, p, clip ? scale : NULL, step));
		if (sh.part > 0)
			TRY(dataflow_submit_all_gather(m->grad_comm, s, d, sh.part, llama_at(m->blocks[b].param, sh.own, d),
						       m->blocks[b].param));
	}
	return DATAFLOW_OK;
}
