/* The executor's optimizer phase: the global gradient norm over every block in block order
 * (the all-resident model's order, so the same sum), clipping, and AdamW per block where the
 * plan puts the state: in place on the device, streamed through two optimizer slots, or over
 * host memory (ops of the handle on its registered host ranges). It starts once the training
 * pass is done (every gradient is final). It ends without one where its memory is
 * its own (the scalars always are; the overlapped optimizer's slots too): each block's update
 * records its tracks (update_done), so the next step's forward of block b waits only for b's. */
#include <math.h>

#include "ring_exec_internal.h"

static void *grad_home(const Ring_Block *b)
{
	return b->dev[DATAFLOW_BLOCK_GRAD] ? b->dev[DATAFLOW_BLOCK_GRAD] : b->host[DATAFLOW_BLOCK_GRAD];
}

Dataflow_Status dataflow_ring_executor_scale_grads(Dataflow_Ring_Executor *x, float factor)
{
	if (!x || !isfinite(factor))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring scale_grads: an executor and a finite factor are required, got %g", factor);
	TRY(ring_barrier(x));
	for (int b = 0; b < x->N; b++) {
		void *g = grad_home(&x->blocks[b]);
		Dataflow_Trace_Span *span;
		TRY(ring_span_begin(x, RS_OPT, DATAFLOW_RING_WORK_SCALE_GRADS, b, -1, 0, &span));
		TRY(dataflow_submit_add(x->h, x->s[RS_OPT], ring_grad_home_dtype(x, b), x->blocks[b].numel, factor, g, 0.0f,
					g, g));
		TRY(ring_span_end(x, span));
	}
	return ring_barrier(x);
}

Dataflow_Status ring_adamw(Dataflow_Ring_Executor *x, int b, int s, const Dataflow_Block_Memory *mem,
			   const Dataflow_AdamW_Params *p, const float *scale, int64_t step)
{
	DataflowDatatype dt = dataflow_blocked_model_config(x->model)->dtype, gt = ring_grad_home_dtype(x, b);
	int64_t n = x->blocks[b].numel;
	if (x->state == DATAFLOW_OPTIMIZER_STATE_FP32 && gt == DATAFLOW_FP32)
		return dataflow_block_adamw(x->model, b, s, mem, p, scale, step);
	if (x->state == DATAFLOW_OPTIMIZER_STATE_FP32) /* a bf16 host gradient, read as it is */
		return dataflow_submit_adamw_step(x->h, s, dt, gt, n, mem->param, mem->grad, mem->m, mem->v, mem->master,
						  scale, p->lr, p->beta1, p->beta2, p->eps, p->weight_decay, step);
	if (x->state == DATAFLOW_OPTIMIZER_STATE_BF16) /* each block its own stream of rounding words */
		return dataflow_submit_adamw_step_bf16_state(x->h, s, dt, gt, n, mem->param, mem->grad, mem->m,
							     mem->v, mem->master, scale, p->lr, p->beta1, p->beta2, p->eps,
							     p->weight_decay, step,
							     p->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(b + 1)));
	char *m = (char *)mem->m, *v = (char *)mem->v; /* codes, then the absmax of each block */
	int64_t codes = ring_align64(n);
	return dataflow_submit_adamw_step_8bit(x->h, s, dt, gt, n, mem->param, mem->grad, m, v, m + codes,
					       v + codes, x->qmap, x->qmap + DATAFLOW_ADAMW_8BIT_CODES, mem->master, scale,
					       p->lr, p->beta1, p->beta2, p->eps, p->weight_decay, step);
}

/* Block b's update is queued on stream `role` up to here: the next uses of its kinds (the next
 * step's forward of b first) wait for this point, not for the whole optimizer. */
static Dataflow_Status update_done(Dataflow_Ring_Executor *x, int b, int role)
{
	Ring_Block *blk = &x->blocks[b];
	for (int k = 0; k < DATAFLOW_BLOCK_NUM_KINDS; k++)
		TRY(track_after(x, blk->dev[k] ? &blk->dev_track[k] : &blk->host_track[k], role));
	return DATAFLOW_OK;
}

/* Streams block b's host-held kinds through optimizer slot k, updates, sends them home. */
static Dataflow_Status adamw_streamed(Dataflow_Ring_Executor *x, int b, const Dataflow_AdamW_Params *params,
				     const float *scale, int64_t step)
{
	Ring_Block *blk = &x->blocks[b];
	int k = b % 2;
	Track *t = &x->opt_track[k];
	void *kinds[DATAFLOW_BLOCK_NUM_KINDS] = {0};
	char *at = x->opt_slot[k];
	Dataflow_Trace_Span *span;
	TRY(track_before(x, t, RS_IN));
	TRY(ring_span_begin(x, RS_IN, DATAFLOW_RING_WORK_OPT_IN, b, -1, (uint64_t)ring_opt_slot_bytes(x, b), &span));
	for (int kind = 0; kind < DATAFLOW_BLOCK_NUM_KINDS; kind++) {
		if (kind == DATAFLOW_BLOCK_MASTER && !x->master)
			continue;
		kinds[kind] = blk->dev[kind];
		if (kinds[kind])
			continue;
		int64_t bytes = kind == DATAFLOW_BLOCK_GRAD ? ring_host_grad_bytes(x, b) : blk->bytes[kind];
		kinds[kind] = at;
		at += ring_align64(bytes);
		TRY(dataflow_submit_inbound_transfer(x->h, x->s[RS_IN], kinds[kind], blk->host[kind], (uint64_t)bytes));
	}
	TRY(ring_span_end(x, span));
	TRY(track_after(x, t, RS_IN));
	TRY(update_done(x, b, RS_IN));
	TRY(track_before(x, t, RS_OPT));
	Dataflow_Block_Memory mem = {kinds[DATAFLOW_BLOCK_PARAM], kinds[DATAFLOW_BLOCK_GRAD], kinds[DATAFLOW_BLOCK_ADAM_M],
				     kinds[DATAFLOW_BLOCK_ADAM_V], kinds[DATAFLOW_BLOCK_MASTER]};
	TRY(ring_span_begin(x, RS_OPT, DATAFLOW_RING_WORK_ADAMW, b, -1, 0, &span));
	TRY(ring_adamw(x, b, x->s[RS_OPT], &mem, params, scale, step));
	TRY(ring_span_end(x, span));
	TRY(track_after(x, t, RS_OPT));
	TRY(update_done(x, b, RS_OPT));
	TRY(track_before(x, t, RS_OUT));
	uint64_t out = 0;
	for (int kind = 0; kind < DATAFLOW_BLOCK_NUM_KINDS; kind++)
		out += kind != DATAFLOW_BLOCK_GRAD && kinds[kind] && !blk->dev[kind] ? (uint64_t)blk->bytes[kind] : 0;
	TRY(ring_span_begin(x, RS_OUT, DATAFLOW_RING_WORK_OPT_OUT, b, -1, out, &span));
	for (int kind = 0; kind < DATAFLOW_BLOCK_NUM_KINDS; kind++)
		if (kind != DATAFLOW_BLOCK_GRAD && kinds[kind] && !blk->dev[kind])
			TRY(dataflow_submit_outbound_transfer(x->h, x->s[RS_OUT], blk->host[kind], kinds[kind],
							      (uint64_t)blk->bytes[kind]));
	TRY(ring_span_end(x, span));
	TRY(update_done(x, b, RS_OUT));
	return track_after(x, t, RS_OUT);
}

/* Every gradient is final: the streams the optimizer uses wait for the training pass (all of
 * them, a barrier, where its memory is the training's). The others go on: the inbound stream
 * with the next step's batch. */
static Dataflow_Status optimizer_waits_for_training(Dataflow_Ring_Executor *x)
{
	if (ring_optimizer_fenced(x))
		return ring_barrier(x);
	Track training;
	for (int r = 0; r < RS_NUM; r++)
		TRY(track_after(x, &training, r));
	int streamed = x->plan.optimizer == DATAFLOW_RING_OPT_DEVICE_OVERLAPPED; /* its slots come and go */
	TRY(track_before(x, &training, RS_OPT));
	if (streamed)
		TRY(track_before(x, &training, RS_IN));
	return streamed ? track_before(x, &training, RS_OUT) : DATAFLOW_OK;
}

Dataflow_Status dataflow_ring_executor_apply(Dataflow_Ring_Executor *x, const Dataflow_AdamW_Params *params,
					     double max_grad_norm, int64_t step)
{
	if (!x || !params)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring apply: executor and params are required");
	if (!(max_grad_norm >= 0) || step < 1)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring apply: max_grad_norm must be >= 0 and step >= 1, got %g and %lld",
					  max_grad_norm, (long long)step);
	if (x->plan.shard_ranks > 1 && !x->shard)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring apply: the plan shards the optimizer state over %d ranks; set the communicator "
					  "first (set_comm with shard_optimizer)", x->plan.shard_ranks);
	/* The last update ran under this step's forward, which waited for it block by block: done
	 * with it before queuing the next, so that its failure surfaces here, at the next step. */
	if (x->s[RS_OPT] != x->s[RS_COMPUTE])
		TRY(dataflow_sync_stream(x->h, x->s[RS_OPT]));
	TRY(optimizer_waits_for_training(x));
	int s = x->s[RS_OPT], clip = max_grad_norm > 0;
	Dataflow_Trace_Span *span;
	TRY(ring_span_begin(x, RS_OPT, DATAFLOW_RING_WORK_GRAD_NORM, -1, -1, 0, &span));
	if (x->shard)
		TRY(ring_sharded_norm_sq(x));
	else
		for (int b = 0; b < x->N; b++)
			TRY(ring_grad_home_dtype(x, b) == DATAFLOW_FP32
				    ? dataflow_block_grad_norm_sq(x->model, b, s, grad_home(&x->blocks[b]), x->norm_ws,
								  x->sumsq, b > 0)
				    : dataflow_submit_grad_norm_sq(x->h, s, DATAFLOW_BF16, DATAFLOW_FP64, x->blocks[b].numel,
								   grad_home(&x->blocks[b]), x->norm_ws, x->sumsq, b > 0));
	TRY(dataflow_submit_clip_by_global_norm(x->h, s, DATAFLOW_FP64, x->sumsq, clip ? max_grad_norm : 1e30, x->scale,
						x->norm));
	TRY(ring_span_end(x, span));
	TRY(dataflow_submit_outbound_transfer(x->h, s, x->host_norm, x->norm, 4));
	const float *scale = clip ? x->scale : NULL;
	for (int b = 0; b < x->N && x->shard; b++)
		TRY(ring_sharded_adamw(x, b, params, scale, step));
	for (int b = 0; b < x->N && !x->shard; b++) {
		Ring_Block *blk = &x->blocks[b];
		TRY(ring_disk_before(x, b)); /* m and v on disk: into staging (the disk tier) */
		if (x->plan.optimizer == DATAFLOW_RING_OPT_DEVICE_STREAMED ||
		    x->plan.optimizer == DATAFLOW_RING_OPT_DEVICE_OVERLAPPED) {
			TRY(adamw_streamed(x, b, params, scale, step));
			TRY(ring_disk_after(x, b));
			continue;
		}
		/* resident state, or every kind on the host */
		void *home[DATAFLOW_BLOCK_NUM_KINDS];
		for (int k = 0; k < DATAFLOW_BLOCK_NUM_KINDS; k++)
			home[k] = blk->dev[k] ? blk->dev[k] : blk->host[k];
		Dataflow_Block_Memory mem = {home[DATAFLOW_BLOCK_PARAM], home[DATAFLOW_BLOCK_GRAD], home[DATAFLOW_BLOCK_ADAM_M],
					     home[DATAFLOW_BLOCK_ADAM_V], x->master ? home[DATAFLOW_BLOCK_MASTER] : NULL};
		TRY(ring_span_begin(x, RS_OPT, DATAFLOW_RING_WORK_ADAMW, b, -1, 0, &span));
		TRY(ring_adamw(x, b, s, &mem, params, scale, step));
		TRY(ring_span_end(x, span));
		TRY(update_done(x, b, RS_OPT));
		blk->param_stale = blk->train_param && !blk->dev[DATAFLOW_BLOCK_PARAM];
		TRY(ring_disk_after(x, b));
	}
	for (int i = 0; i < x->W; i++) /* slots and staging hold the old weights */
		x->wslot_layer[i] = -1;
	x->edge_stage_block = -1;
	dataflow_trace_next_step(x->trace);
	return ring_optimizer_fenced(x) ? ring_barrier(x) : DATAFLOW_OK;
}
