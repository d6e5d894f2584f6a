/* Data-parallel training in the executor: each block's gradient summed over the ranks on the
 * comm stream as soon as it is final, and ZeRO-1, the optimizer state sharded over the ranks.
 *
 * ZeRO-1 (the layout dataflow_ring_shard_optimizer_state gives a resident model's state): block b's n
 * elements split into N equal parts of q = n / N (rank r owns [r q, (r + 1) q)) and a tail
 * [N q, n) of fewer than N elements every rank updates alike; the rank's m, v (and master) of
 * the block are [its part | the tail]. The backward reduce-scatters each gradient (rank r
 * receives its part summed in rank order: the bits an all-reduce gives) and all-reduces the
 * tail; the step sums the squared norms of every rank's part (the tail counted on rank 0),
 * updates the part and the tail, and all-gathers the parts of the weights. In the ring (a plan
 * with shard_ranks N) the same runs where each kind's home is: the state the executor keeps, on
 * the device or the host, is [part | tail] from the start, the gradient's home holds the
 * reduce-scattered sums (sent home whole, its other parts unread), and the weights are gathered
 * into their home before the next step's forward reads them (the optimizer phase is fenced). */

#include <string.h>

#include "ring_exec_internal.h"

typedef struct {
	int64_t part, own, tail, tail_len; /* q, r q, N q, n - N q */
} Shard;

static Shard shard_n(Dataflow_Comm *comm, int64_t n)
{
	int64_t ranks = dataflow_comm_size(comm), q = n / ranks;
	return (Shard){q, dataflow_comm_rank(comm) * q, ranks * q, n - ranks * q};
}

static Shard shard_of(const Dataflow_Ring_Executor *x, int b)
{
	return shard_n(x->comm, x->blocks[b].numel);
}

Dataflow_Status ring_sum_grad(Dataflow_Ring_Executor *x, int b, void *g, Track *track)
{
	Dataflow_Trace_Span *span;
	int64_t n = x->blocks[b].numel;
	int cs = x->s[RS_COMM];
	float *grad = g;
	TRY(track_before(x, track, RS_COMM));
	TRY(ring_span_begin(x, RS_COMM, DATAFLOW_RING_WORK_ALL_REDUCE, b, -1, (uint64_t)n * 4, &span));
	if (x->shard) {
		Shard sh = shard_of(x, b);
		if (sh.part > 0)
			TRY(dataflow_submit_reduce_scatter(x->comm, cs, DATAFLOW_FP32, sh.part, grad, grad + sh.own,
							   DATAFLOW_REDUCE_SUM));
		if (sh.tail_len > 0)
			TRY(dataflow_submit_all_reduce(x->comm, cs, DATAFLOW_FP32, sh.tail_len, grad + sh.tail, grad + sh.tail,
						       DATAFLOW_REDUCE_SUM));
	} else {
		TRY(dataflow_submit_all_reduce(x->comm, cs, DATAFLOW_FP32, n, grad, grad, DATAFLOW_REDUCE_SUM));
	}
	TRY(ring_span_end(x, span));
	return track_after(x, track, RS_COMM);
}

/* where block b's kind lives: the device when it holds the truth, else the host */
static char *home(const Dataflow_Ring_Executor *x, int b, Dataflow_Block_Kind kind)
{
	const Ring_Block *blk = &x->blocks[b];
	return blk->dev[kind] ? blk->dev[kind] : blk->host[kind];
}

/* bytes per element of block b's gradient home (fp32, or bf16 host gradients) */
static int64_t grad_es(const Dataflow_Ring_Executor *x, int b)
{
	return ring_grad_home_dtype(x, b) == DATAFLOW_BF16 ? 2 : 4;
}

/* AdamW over n elements of block b from element `at`, its state from `state_at`. */
static Dataflow_Status adamw_range(Dataflow_Ring_Executor *x, int b, int64_t at, int64_t state_at, int64_t n,
				   const Dataflow_AdamW_Params *p, const float *clip_scale, int64_t step)
{
	if (n == 0)
		return DATAFLOW_OK;
	const Dataflow_Llama_Config *cfg = dataflow_blocked_model_config(x->model);
	float *master = x->master ? (float *)home(x, b, DATAFLOW_BLOCK_MASTER) + state_at : NULL;
	return dataflow_submit_adamw_step(x->h, x->s[RS_OPT], cfg->dtype, ring_grad_home_dtype(x, b), n,
					  home(x, b, DATAFLOW_BLOCK_PARAM) + at * x->es,
					  home(x, b, DATAFLOW_BLOCK_GRAD) + at * grad_es(x, b),
					  (float *)home(x, b, DATAFLOW_BLOCK_ADAM_M) + state_at,
					  (float *)home(x, b, DATAFLOW_BLOCK_ADAM_V) + state_at, master, clip_scale, p->lr, p->beta1,
					  p->beta2, p->eps, p->weight_decay, step);
}

Dataflow_Status ring_sharded_norm_sq(Dataflow_Ring_Executor *x)
{
	int s = x->s[RS_OPT], lead = dataflow_comm_rank(x->comm) == 0;
	TRY(dataflow_set_mem(x->h, s, x->sumsq, 0, 8));
	for (int b = 0; b < x->N; b++) {
		Shard sh = shard_of(x, b);
		const char *g = home(x, b, DATAFLOW_BLOCK_GRAD);
		DataflowDatatype gt = ring_grad_home_dtype(x, b);
		int64_t es = grad_es(x, b);
		if (sh.part > 0)
			TRY(dataflow_submit_grad_norm_sq(x->h, s, gt, DATAFLOW_FP64, sh.part, g + sh.own * es, x->norm_ws,
							 x->sumsq, 1));
		if (lead && sh.tail_len > 0)
			TRY(dataflow_submit_grad_norm_sq(x->h, s, gt, DATAFLOW_FP64, sh.tail_len, g + sh.tail * es,
							 x->norm_ws, x->sumsq, 1));
	}
	return dataflow_submit_all_reduce(x->comm, s, DATAFLOW_FP64, 1, x->sumsq, x->sumsq, DATAFLOW_REDUCE_SUM);
}

Dataflow_Status ring_sharded_adamw(Dataflow_Ring_Executor *x, int b, const Dataflow_AdamW_Params *params,
				   const float *clip_scale, int64_t step)
{
	Shard sh = shard_of(x, b);
	char *param = home(x, b, DATAFLOW_BLOCK_PARAM);
	const Dataflow_Llama_Config *cfg = dataflow_blocked_model_config(x->model);
	Dataflow_Trace_Span *span;
	TRY(ring_span_begin(x, RS_OPT, DATAFLOW_RING_WORK_ADAMW, b, -1, 0, &span));
	TRY(adamw_range(x, b, sh.own, 0, sh.part, params, clip_scale, step));
	TRY(adamw_range(x, b, sh.tail, sh.part, sh.tail_len, params, clip_scale, step));
	if (sh.part > 0)
		TRY(dataflow_submit_all_gather(x->comm, x->s[RS_OPT], cfg->dtype, sh.part, param + sh.own * x->es, param));
	Ring_Block *blk = &x->blocks[b]; /* a resident copy of a host home is older now */
	blk->param_stale = blk->train_param && !blk->dev[DATAFLOW_BLOCK_PARAM];
	return ring_span_end(x, span);
}

Dataflow_Status dataflow_ring_executor_set_comm(Dataflow_Ring_Executor *x, Dataflow_Comm *comm, int stream,
						int shard_optimizer)
{
	if (!x)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring set_comm: executor is required");
	int n = dataflow_handle_num_streams(x->h);
	if (comm && (stream < 0 || stream >= n))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring set_comm: stream must be in [0, %d) (the handle's streams), got %d", n, stream);
	if (comm && shard_optimizer && x->state != DATAFLOW_OPTIMIZER_STATE_FP32)
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "ring set_comm: a sharded optimizer state (ZeRO-1) is fp32 only; this executor "
					  "keeps %s state", dataflow_optimizer_state_name(x->state));
	if (comm && shard_optimizer && !x->adopted && x->plan.shard_ranks != dataflow_comm_size(comm))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring set_comm: a sharded optimizer state (ZeRO-1) needs an executor adopting a "
					  "resident model's sharded state (dataflow_ring_executor_adopt) or a plan sharding "
					  "it over the communicator's %d ranks (plan shard_ranks %d)",
					  dataflow_comm_size(comm), x->plan.shard_ranks);
	if (comm && !shard_optimizer && x->plan.shard_ranks > 1)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring set_comm: the plan shards the optimizer state over %d ranks; pass "
					  "shard_optimizer", x->plan.shard_ranks);
	TRY(dataflow_ring_executor_wait(x)); /* the old stream's sums are done */
	x->comm = comm;
	x->shard = comm && shard_optimizer;
	x->s[RS_COMM] = comm ? stream : x->s[RS_COMPUTE];
	if (!x->shard || !x->master_unset)
		return DATAFLOW_OK;
	for (int b = 0; b < x->N; b++)
		TRY(ring_sharded_set_master(x, b));
	x->master_unset = 0;
	return dataflow_sync_stream(x->h, x->s[RS_OPT]);
}

Dataflow_Status ring_sharded_set_master(Dataflow_Ring_Executor *x, int b)
{
	if (!x->shard) {
		x->master_unset = 1;
		return DATAFLOW_OK;
	}
	Shard sh = shard_of(x, b);
	const char *param = home(x, b, DATAFLOW_BLOCK_PARAM);
	float *master = (float *)home(x, b, DATAFLOW_BLOCK_MASTER);
	int s = x->s[RS_OPT];
	if (sh.part > 0)
		TRY(dataflow_submit_cast(x->h, s, DATAFLOW_BF16, DATAFLOW_FP32, sh.part, param + sh.own * x->es, master));
	return sh.tail_len > 0 ? dataflow_submit_cast(x->h, s, DATAFLOW_BF16, DATAFLOW_FP32, sh.tail_len,
						      param + sh.tail * x->es, master + sh.part)
			       : DATAFLOW_OK;
}

Dataflow_Status ring_sharded_state_copy(Dataflow_Ring_Executor *x, int b, Dataflow_Block_Kind kind, void *buffer,
					int write)
{
	if (!x->shard)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring executor %s: block %d's optimizer state is sharded over %d ranks; set the "
					  "communicator first (set_comm with shard_optimizer)",
					  write ? "write" : "read", b, x->plan.shard_ranks);
	Shard sh = shard_of(x, b);
	float *state = (float *)home(x, b, kind), *whole = buffer;
	int s = x->s[RS_OPT], on_device = x->blocks[b].dev[kind] != NULL;
	if (write) {
		if (!on_device) {
			memcpy(state, whole + sh.own, (size_t)sh.part * 4);
			memcpy(state + sh.part, whole + sh.tail, (size_t)sh.tail_len * 4);
			return DATAFLOW_OK;
		}
		if (sh.part > 0)
			TRY(dataflow_submit_inbound_transfer(x->h, s, state, whole + sh.own, (uint64_t)sh.part * 4));
		if (sh.tail_len > 0)
			TRY(dataflow_submit_inbound_transfer(x->h, s, state + sh.part, whole + sh.tail, (uint64_t)sh.tail_len * 4));
		return dataflow_sync_stream(x->h, s);
	}
	/* the parts gathered straight into the caller's memory (registered for the comm: no device
	 * memory, which a capped ring has none of to spare), the tail alike on every rank */
	uint64_t bytes = (uint64_t)x->blocks[b].numel * 4;
	TRY(dataflow_enable_access_to_host_mem(x->h, whole, bytes, 0));
	Dataflow_Status st = sh.part > 0 ? dataflow_submit_all_gather(x->comm, s, DATAFLOW_FP32, sh.part, state, whole)
					 : DATAFLOW_OK;
	if (st == DATAFLOW_OK && sh.tail_len > 0 && on_device)
		st = dataflow_submit_outbound_transfer(x->h, s, whole + sh.tail, state + sh.part, (uint64_t)sh.tail_len * 4);
	else if (st == DATAFLOW_OK)
		memcpy(whole + sh.tail, state + sh.part, (size_t)sh.tail_len * 4);
	if (st == DATAFLOW_OK)
		st = dataflow_sync_stream(x->h, s);
	dataflow_disable_access_to_host_mem(x->h, whole);
	return st;
}

static Dataflow_Status copy_floats(Dataflow_Handle *h, int s, float *dst, const float *src, int64_t n)
{
	return n > 0 ? dataflow_submit_peer_transfer(h, s, dst, src, (uint64_t)n * 4) : DATAFLOW_OK;
}

/* One block's fp32 state of n elements between the layouts: full -> [part | tail], or back
 * (all ranks); *state becomes the new memory, the old is freed after the copies. */
static Dataflow_Status convert(Dataflow_Handle *h, Dataflow_Comm *comm, int s, int64_t n, float **state, int shard)
{
	Shard sh = shard_n(comm, n);
	float *from = *state, *to = NULL;
	TRY(dataflow_alloc_mem(h, (uint64_t)(shard ? sh.part + sh.tail_len : n) * 4, (void **)&to));
	Dataflow_Status st;
	if (shard) {
		st = copy_floats(h, s, to, from + sh.own, sh.part);
		if (st == DATAFLOW_OK)
			st = copy_floats(h, s, to + sh.part, from + sh.tail, sh.tail_len);
	} else {
		st = sh.part > 0 ? dataflow_submit_all_gather(comm, s, DATAFLOW_FP32, sh.part, from, to) : DATAFLOW_OK;
		if (st == DATAFLOW_OK)
			st = copy_floats(h, s, to + sh.tail, from + sh.part, sh.tail_len);
	}
	if (st != DATAFLOW_OK) {
		dataflow_free_mem(h, to);
		return st;
	}
	*state = to;
	return dataflow_free_mem(h, from); /* stream-ordered: after the copies */
}

Dataflow_Status dataflow_ring_shard_optimizer_state(Dataflow_Handle *h, Dataflow_Comm *comm, int stream,
						    const Dataflow_Blocked_Model *model, Dataflow_Block_Memory *blocks,
						    int shard, int64_t *state_numel)
{
	if (!h || !comm || !model || !blocks || !state_numel)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring shard_optimizer_state: handle, comm, model, blocks and state_numel are "
					  "required");
	int num_blocks = dataflow_blocked_model_num_blocks(model);
	for (int b = 0; b < num_blocks; b++) {
		Dataflow_Block_Sizes sizes;
		TRY(dataflow_blocked_model_block_sizes(model, b, &sizes));
		float **state[] = {&blocks[b].m, &blocks[b].v, &blocks[b].master};
		for (int i = 0; i < 3; i++)
			if (*state[i])
				TRY(convert(h, comm, stream, sizes.numel, state[i], shard));
		Shard sh = shard_n(comm, sizes.numel);
		state_numel[b] = shard ? sh.part + sh.tail_len : sizes.numel;
	}
	return DATAFLOW_OK;
}
