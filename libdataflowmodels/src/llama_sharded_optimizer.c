/* ZeRO-1's layout of a resident model's optimizer state (m, v, fp32 master weights), sharded
 * over the ranks of the gradient communicator. Block b's n elements split into N equal parts of
 * q = n / N (rank r owns [r q, (r + 1) q)) and a tail [N q, n) of fewer than N elements that
 * every rank updates alike; a rank's state of the block is [its part | the tail], q + n - N q
 * elements. The sharded training (reduce-scatter, the step on the part, all-gather) is the ring
 * executor's (libdataflowring/src/ring_data_parallel.c), which adopts this state; the
 * communicator is the one dataflow_llama_set_grad_comm names. */
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

Dataflow_Status dataflow_llama_set_grad_comm(Dataflow_Llama *m, Dataflow_Comm *comm)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama set_grad_comm: model is required");
	TRY(llama_refuse_quantized(m->config, "set_grad_comm"));
	if (m->shard_optimizer)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama set_grad_comm: the optimizer state is sharded over the current communicator's "
					  "ranks; unshard it first (dataflow_llama_shard_optimizer(model, stream, 0))");
	m->grad_comm = comm;
	return DATAFLOW_OK;
}
