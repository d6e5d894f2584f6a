/* The executor's memory: one device arena carved by purpose (the optimizer's phase memory
 * overlapping the training's scratch), host arrays registered with the handle, each block
 * kind's home, and the copies in and out of it. */
#include <stdlib.h>
#include <string.h>

#include "ring_exec_internal.h"

typedef struct {
	char *base; /* NULL while sizing */
	int64_t used;
} Carver;

static void *carve(Carver *c, int64_t bytes)
{
	int64_t at = ring_align64(c->used);
	c->used = at + bytes;
	return c->base ? c->base + at : NULL;
}

Dataflow_Status track_before(Dataflow_Ring_Executor *x, Track *t, int role)
{
	for (int r = 0; r < RS_NUM; r++)
		if (r != role && t->use[r].handle_id)
			TRY(dataflow_submit_dependency(x->h, x->s[role], &t->use[r]));
	return DATAFLOW_OK;
}

Dataflow_Status ring_barrier(Dataflow_Ring_Executor *x)
{
	Track all;
	for (int r = 0; r < RS_NUM; r++)
		TRY(track_after(x, &all, r));
	for (int r = 0; r < RS_NUM; r++)
		TRY(track_before(x, &all, r));
	return DATAFLOW_OK;
}

Dataflow_Status track_after(Dataflow_Ring_Executor *x, Track *t, int role)
{
	return dataflow_get_stream_state(x->h, x->s[role], &t->use[role]);
}

static int edge_resident(const Dataflow_Ring_Executor *x, int b)
{
	return b == 0 ? x->plan.embedding_resident : x->plan.head_resident;
}

static int64_t max_i64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

/* Whether a block's kind lives on the device (its home), from the plan alone. */
static int home_on_device(const Dataflow_Ring_Executor *x, int b, Dataflow_Block_Kind kind)
{
	const Dataflow_Ring_Plan *p = &x->plan;
	int layer = b > 0 && b < x->N - 1;
	if (kind == DATAFLOW_BLOCK_PARAM || kind == DATAFLOW_BLOCK_GRAD)
		return p->optimizer != DATAFLOW_RING_OPT_HOST &&
		       (layer ? (kind == DATAFLOW_BLOCK_PARAM ? x->W : x->G) >= x->L : edge_resident(x, b));
	return p->optimizer == DATAFLOW_RING_OPT_DEVICE_RESIDENT;
}

int64_t ring_opt_slot_bytes(const Dataflow_Ring_Executor *x, int b)
{
	int64_t bytes = 0;
	for (int k = 0; k < DATAFLOW_BLOCK_NUM_KINDS; k++)
		if ((k != DATAFLOW_BLOCK_MASTER || x->master) && !home_on_device(x, b, (Dataflow_Block_Kind)k))
			bytes += ring_align64(k == DATAFLOW_BLOCK_GRAD ? ring_host_grad_bytes(x, b) : x->blocks[b].bytes[k]);
	return bytes;
}

/* m and v in a lean precision are the executor's own even when it adopts a model's memory
 * (the model keeps fp32 moments) */
static int owned_state(const Dataflow_Ring_Executor *x, Dataflow_Block_Kind k)
{
	return (k == DATAFLOW_BLOCK_ADAM_M || k == DATAFLOW_BLOCK_ADAM_V) && x->state != DATAFLOW_OPTIMIZER_STATE_FP32;
}

/* Carves the arena (base NULL: sizes only); returns its bytes. Homes (dev[]) and train_*
 * pointers are set here too. */
static int64_t layout(Dataflow_Ring_Executor *x, char *base)
{
	const Dataflow_Ring_Plan *p = &x->plan;
	Dataflow_Ring_Optimizer opt = p->optimizer;
	Carver c = {base, 0};
	int L = x->L, host_opt = opt == DATAFLOW_RING_OPT_HOST;
	int64_t max_param = 0, max_grad = 0, edge_stage = 0;
	for (int l = 0; l < L; l++) {
		max_param = max_i64(max_param, x->blocks[1 + l].bytes[DATAFLOW_BLOCK_PARAM]);
		max_grad = max_i64(max_grad, x->blocks[1 + l].bytes[DATAFLOW_BLOCK_GRAD]);
	}
	/* phase BOTH: resident edges (or their staging), resident optimizer state, resident slots */
	for (int e = 0; e < 2; e++) {
		int b = e ? x->N - 1 : 0;
		Ring_Block *blk = &x->blocks[b];
		if (x->adopted) {
			blk->train_param = x->adopted[b].param;
			blk->train_grad = x->adopted[b].grad;
		} else if (edge_resident(x, b)) {
			blk->train_param = carve(&c, blk->bytes[DATAFLOW_BLOCK_PARAM]);
			blk->train_grad = carve(&c, blk->bytes[DATAFLOW_BLOCK_GRAD]);
		} else {
			edge_stage = max_i64(edge_stage, ring_align64(blk->bytes[DATAFLOW_BLOCK_PARAM]) +
								 blk->bytes[DATAFLOW_BLOCK_GRAD]);
		}
	}
	x->edge_stage = edge_stage ? carve(&c, edge_stage) : NULL;
	if (opt == DATAFLOW_RING_OPT_DEVICE_RESIDENT)
		for (int b = 0; b < x->N; b++) {
			Ring_Block *blk = &x->blocks[b];
			const Dataflow_Block_Memory *own = x->adopted ? &x->adopted[b] : NULL;
			void *adopted[DATAFLOW_BLOCK_NUM_KINDS] = {0};
			if (own) {
				adopted[DATAFLOW_BLOCK_ADAM_M] = own->m;
				adopted[DATAFLOW_BLOCK_ADAM_V] = own->v;
				adopted[DATAFLOW_BLOCK_MASTER] = own->master;
			}
			for (int k = DATAFLOW_BLOCK_ADAM_M; k <= (x->master ? DATAFLOW_BLOCK_MASTER : DATAFLOW_BLOCK_ADAM_V); k++)
				blk->dev[k] = own && !owned_state(x, (Dataflow_Block_Kind)k) ? adopted[k]
											: carve(&c, blk->bytes[k]);
		}
	x->qmap = x->state == DATAFLOW_OPTIMIZER_STATE_8BIT ? carve(&c, 2 * DATAFLOW_ADAMW_8BIT_CODES * 4) : NULL;
	int weights_resident = x->W >= L, grads_resident = x->G >= L;
	/* resident slots hold the truth: they outlive the training phase */
	for (int i = 0; i < x->W && weights_resident; i++)
		x->wslot[i] = x->adopted ? x->adopted[1 + i].param : carve(&c, max_param);
	for (int i = 0; i < x->G && grads_resident; i++)
		x->gslot[i] = x->adopted ? x->adopted[1 + i].grad : carve(&c, max_grad);
	/* the grad-norm scalars and workspace: outside the training phase, which the next step's
	 * forward reuses while the update may still run */
	int64_t largest = 0;
	for (int b = 0; b < x->N; b++)
		largest = max_i64(largest, x->blocks[b].numel);
	x->norm_ws = carve(&c, dataflow_grad_norm_sq_workspace_bytes(largest));
	x->sumsq = carve(&c, 8);
	x->scale = carve(&c, 4);
	x->norm = carve(&c, 4);
	int64_t phase_start = ring_align64(c.used);
	Carver training = {base, phase_start};
	for (int i = 0; i < x->W && !weights_resident; i++)
		x->wslot[i] = carve(&training, max_param);
	for (int i = 0; i < x->G && !grads_resident; i++)
		x->gslot[i] = carve(&training, max_grad);
	for (int e = 0; e < 2; e++) { /* homes of the edges */
		Ring_Block *blk = &x->blocks[e ? x->N - 1 : 0];
		blk->dev[DATAFLOW_BLOCK_PARAM] = host_opt ? NULL : blk->train_param;
		blk->dev[DATAFLOW_BLOCK_GRAD] = host_opt ? NULL : blk->train_grad;
	}
	for (int l = 0; l < L; l++) {
		Ring_Block *blk = &x->blocks[1 + l];
		blk->train_param = weights_resident ? x->wslot[l] : NULL;
		blk->train_grad = grads_resident ? x->gslot[l] : NULL;
		blk->dev[DATAFLOW_BLOCK_PARAM] = host_opt ? NULL : blk->train_param;
		blk->dev[DATAFLOW_BLOCK_GRAD] = host_opt ? NULL : blk->train_grad;
	}
	/* phase TRAINING: bf16 host gradients' staging, activations, staging, the chunk working set */
	int64_t grad_stage = ring_grad_stage_bytes(x);
	for (int i = 0; i < 2; i++)
		x->grad_stage[i] = grad_stage ? carve(&training, grad_stage) : NULL;
	int64_t max_stride = 0, max_recomputed = 0, max_dacts = 0, head_saved, head_dacts;
	for (int l = 0; l < L; l++) {
		Ring_Acts *a = &x->acts[l];
		int64_t saved, recomputed, dacts;
		dataflow_block_acts_bytes(x->model, 1 + l, a->level, x->T, &saved, &recomputed, &dacts);
		a->stride = ring_x_bytes(x, x->T) + ring_align64(saved);
		max_recomputed = max_i64(max_recomputed, recomputed);
		max_dacts = max_i64(max_dacts, dacts);
		if (a->on_device)
			a->base = carve(&training, x->K * a->stride);
		else
			max_stride = max_i64(max_stride, a->stride);
	}
	/* K/V: a layer keeping its activations has its own; offloading ones share two pairs, by
	 * parity, so one layer's keys go out (in) while the next layer's are written (read) */
	char *kv_stage[2][2] = {{NULL, NULL}, {NULL, NULL}};
	int kv_staged[2] = {0, 0}; /* carved (NULL pointers while sizing) */
	int64_t kv_bytes = x->K * x->T * x->kvd * x->es;
	for (int l = 0; l < L && p->kv_context; l++) {
		Ring_Acts *a = &x->acts[l];
		int pair = l % 2;
		if (!a->on_device && !kv_staged[pair]) {
			kv_stage[pair][0] = carve(&training, kv_bytes);
			kv_stage[pair][1] = carve(&training, kv_bytes);
			kv_staged[pair] = 1;
		}
		a->kv_k = a->on_device ? carve(&training, kv_bytes) : kv_stage[pair][0];
		a->kv_v = a->on_device ? carve(&training, kv_bytes) : kv_stage[pair][1];
		a->kv_tracks = a->on_device ? NULL : x->kv_stage_tracks[pair];
	}
	if (p->kv_context) {
		x->ctx_dk = carve(&training, p->seq_len * x->kvd * 4);
		x->ctx_dv = carve(&training, p->seq_len * x->kvd * 4);
	}
	dataflow_block_acts_bytes(x->model, x->N - 1, DATAFLOW_SAVE_ALL, x->T, &head_saved, NULL, &head_dacts);
	for (int i = 0; i < 3; i++)
		x->stage[i] = max_stride ? carve(&training, max_stride) : NULL;
	for (int set = 0; set < 2; set++)
		for (int64_t k = 0; k < x->K; k++)
			x->hid[set][k] = carve(&training, x->T * x->H * x->es);
	x->recomputed = max_recomputed ? carve(&training, max_recomputed) : NULL;
	x->dacts = carve(&training, max_i64(max_dacts, head_dacts));
	x->workspace = carve(&training, dataflow_blocked_model_workspace_bytes(x->model, x->T));
	x->head_saved = carve(&training, head_saved);
	for (int64_t k = 0; k < x->K; k++)
		x->dev_batch[k] = carve(&training, x->batch_numel * 4);
	x->dev_losses = carve(&training, x->K * x->T * 4);
	const Dataflow_Llama_Config *cfg = dataflow_blocked_model_config(x->model);
	int router_loss = cfg->num_experts > 0 && cfg->router_aux_loss_coef > 0;
	x->router_stats = router_loss ? carve(&training, 2 * cfg->num_experts * 4) : NULL;
	x->router_loss = router_loss ? carve(&training, 2 * 4) : NULL;
	/* the optimizer's slots: in the training phase (overlapped) or their own (streamed) */
	Carver optimizer = {base, phase_start};
	int64_t slot = 0;
	for (int b = 0; b < x->N; b++)
		slot = max_i64(slot, ring_opt_slot_bytes(x, b));
	int streamed = opt == DATAFLOW_RING_OPT_DEVICE_STREAMED || opt == DATAFLOW_RING_OPT_DEVICE_OVERLAPPED;
	Carver *opt_in = opt == DATAFLOW_RING_OPT_DEVICE_OVERLAPPED ? &training : &optimizer;
	for (int i = 0; i < 2; i++)
		x->opt_slot[i] = streamed ? carve(opt_in, slot) : NULL;
	return max_i64(training.used, optimizer.used);
}

static void *host_alloc(Dataflow_Ring_Executor *x, int64_t bytes, Dataflow_Status *st)
{
	if (*st != DATAFLOW_OK || bytes <= 0)
		return NULL;
	size_t size = (size_t)ring_align64(bytes);
	void *p = aligned_alloc(256, (size + 255) / 256 * 256);
	if (!p) {
		*st = dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "ring executor: host allocation of %lld bytes failed",
					 (long long)bytes);
		return NULL;
	}
	memset(p, 0, size);
	*st = dataflow_enable_access_to_host_mem(x->h, p, size, 0);
	if (*st != DATAFLOW_OK) {
		free(p);
		return NULL;
	}
	x->host_allocs[x->num_host_allocs++] = p;
	x->host_bytes += size;
	return p;
}

static Dataflow_Status check_plan(Dataflow_Ring_Executor *x, const Dataflow_Ring_Plan *p)
{
	uint64_t params = 0;
	for (int b = 0; b < x->N; b++)
		params += (uint64_t)x->blocks[b].bytes[DATAFLOW_BLOCK_PARAM];
	if (p->num_layers != x->L || p->model_param_bytes != params)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring executor: the plan is for another model: %d layers and %llu parameter "
					  "bytes, this model has %d layers and %llu bytes",
					  p->num_layers, (unsigned long long)p->model_param_bytes, x->L,
					  (unsigned long long)params);
	if (p->chunk_tokens <= 0 || p->chunk_tokens > ((int64_t)1 << 31) || p->chunks_per_round <= 0 ||
	    p->rounds_per_step <= 0 || p->chunks_per_round * p->rounds_per_step > ((int64_t)1 << 20) ||
	    p->weight_slots < 1 || p->weight_slots > x->L || p->grad_slots < 1 || p->grad_slots > x->L ||
	    (int)p->optimizer < 0 || p->optimizer >= DATAFLOW_RING_NUM_OPT || p->seq_len <= 0 ||
	    !dataflow_optimizer_state_name(p->optimizer_state))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring executor: the plan's shape is invalid (chunk_tokens %lld, chunks_per_round "
					  "%lld, rounds_per_step %lld, weight_slots %d, grad_slots %d of %d layers, "
					  "optimizer %d, optimizer_state %d)",
					  (long long)p->chunk_tokens, (long long)p->chunks_per_round,
					  (long long)p->rounds_per_step, p->weight_slots, p->grad_slots, x->L, (int)p->optimizer,
					  (int)p->optimizer_state);
	if (p->master_weights && x->blocks[1].bytes[DATAFLOW_BLOCK_MASTER] == 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring executor: the plan keeps fp32 master weights, but the model is not bf16");
	if (p->shard_ranks > 1 &&
	    (p->optimizer_state != DATAFLOW_OPTIMIZER_STATE_FP32 || p->disk_total_bytes ||
	     (p->optimizer != DATAFLOW_RING_OPT_DEVICE_RESIDENT && p->optimizer != DATAFLOW_RING_OPT_HOST)))
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "ring executor: a plan sharding the optimizer state (shard_ranks %d) needs fp32 "
					  "state without a disk tier, updated on the device or the host",
					  p->shard_ranks);
	if (x->tied && !(p->embedding_resident && p->head_resident))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring executor: a tied model needs its embedding and head resident in the plan");
	for (int l = 0; l < x->L; l++)
		if ((int)p->save_level[l] < 0 || p->save_level[l] >= DATAFLOW_NUM_SAVE_LEVELS)
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "ring executor: the plan's save level of layer %d is %d", l,
						  (int)p->save_level[l]);
	return DATAFLOW_OK;
}

/* Adopting a resident model's block memory: the plan must keep everything on the device, and
 * every kind the training and the optimizer use must be given. */
static Dataflow_Status check_adopted(const Dataflow_Ring_Executor *x, const Dataflow_Ring_Plan *p,
				     const Dataflow_Block_Memory *blocks)
{
	if (p->weight_slots != x->L || p->grad_slots != x->L || !p->embedding_resident || !p->head_resident ||
	    p->optimizer != DATAFLOW_RING_OPT_DEVICE_RESIDENT)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring executor adopt: the plan must be all-resident (dataflow_ring_plan_resident), "
					  "got %d weight and %d gradient slots of %d layers, optimizer %s",
					  p->weight_slots, p->grad_slots, x->L, dataflow_ring_optimizer_name(p->optimizer));
	int fp32_state = p->optimizer_state == DATAFLOW_OPTIMIZER_STATE_FP32; /* else the executor's own */
	for (int b = 0; b < x->N; b++)
		if (!blocks[b].param || !blocks[b].grad || (fp32_state && (!blocks[b].m || !blocks[b].v)) ||
		    (x->master && !blocks[b].master))
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "ring executor adopt: block %d lacks its %s memory", b,
						  !blocks[b].param ? "parameter"
						  : !blocks[b].grad ? "gradient"
						  : fp32_state && (!blocks[b].m || !blocks[b].v) ? "AdamW state (m, v)"
										  : "master-weight");
	return DATAFLOW_OK;
}

static Dataflow_Status check_streams(Dataflow_Ring_Executor *x, const Dataflow_Ring_Streams *s)
{
	int ids[RS_NUM] = {0, 1, 2, 3, 0, 0};
	if (s) {
		ids[RS_COMPUTE] = s->compute;
		ids[RS_IN] = s->inbound;
		ids[RS_OUT] = s->outbound;
		ids[RS_OPT] = s->optimizer;
		ids[RS_COMM] = ids[RS_DISK] = s->compute; /* until set_comm (a disk tier) names one */
	}
	int n = dataflow_handle_num_streams(x->h);
	for (int i = 0; i < RS_NUM; i++) {
		if (ids[i] < 0 || ids[i] >= n)
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "ring executor: streams must be ids in [0, %d) (the handle's streams), got %d",
						  n, ids[i]);
		x->s[i] = ids[i];
	}
	return DATAFLOW_OK;
}

static Dataflow_Status host_arrays(Dataflow_Ring_Executor *x)
{
	Dataflow_Status st = DATAFLOW_OK;
	for (int b = 0; b < x->N; b++) {
		Ring_Block *blk = &x->blocks[b];
		for (int k = 0; k < DATAFLOW_BLOCK_NUM_KINDS; k++)
			if (!blk->dev[k] && blk->bytes[k] && (k != DATAFLOW_BLOCK_MASTER || x->master) &&
			    !ring_disk_holds(x, (Dataflow_Block_Kind)k))
				blk->host[k] = host_alloc(x, k == DATAFLOW_BLOCK_GRAD ? ring_host_grad_bytes(x, b) : blk->bytes[k], &st);
	}
	for (int l = 0; l < x->L; l++)
		if (!x->acts[l].on_device) {
			x->acts[l].base = host_alloc(x, x->K * x->acts[l].stride, &st);
			if (x->plan.kv_context) {
				x->acts[l].host_k = host_alloc(x, x->K * x->T * x->kvd * x->es, &st);
				x->acts[l].host_v = host_alloc(x, x->K * x->T * x->kvd * x->es, &st);
			}
		}
	int64_t chunks = x->K * x->plan.rounds_per_step;
	x->host_batches = host_alloc(x, chunks * x->batch_numel * 4, &st);
	x->host_losses = host_alloc(x, chunks * x->T * 4, &st);
	x->host_norm = host_alloc(x, 4, &st);
	x->host_router_loss = x->router_stats ? host_alloc(x, 4, &st) : NULL;
	return st;
}

/* Zeroes the state the executor allocated (adopted memory keeps its values; zero bytes are
 * zero moments in every precision: an 8-bit block's absmax 0) and uploads the 8-bit codes. */
static Dataflow_Status zero_device_state(Dataflow_Ring_Executor *x)
{
	int queued = 0; /* an executor adopting fp32 state queues nothing: no sync */
	for (int b = 0; b < x->N; b++)
		for (int k = 0; k < DATAFLOW_BLOCK_NUM_KINDS; k++)
			if (x->blocks[b].dev[k] && (!x->adopted || owned_state(x, (Dataflow_Block_Kind)k))) {
				TRY(dataflow_set_mem(x->h, x->s[RS_COMPUTE], x->blocks[b].dev[k], 0,
						     (uint64_t)x->blocks[b].bytes[k]));
				queued = 1;
			}
	if (x->qmap) {
		Dataflow_Status st = DATAFLOW_OK;
		float *codes = host_alloc(x, 2 * DATAFLOW_ADAMW_8BIT_CODES * 4, &st);
		TRY(st);
		dataflow_adamw_8bit_dynamic_code(1, codes);
		dataflow_adamw_8bit_dynamic_code(0, codes + DATAFLOW_ADAMW_8BIT_CODES);
		TRY(dataflow_submit_inbound_transfer(x->h, x->s[RS_COMPUTE], x->qmap, codes,
						     2 * DATAFLOW_ADAMW_8BIT_CODES * 4));
		queued = 1;
	}
	return queued ? dataflow_sync_stream(x->h, x->s[RS_COMPUTE]) : DATAFLOW_OK;
}

static Dataflow_Status build(Dataflow_Ring_Executor *x, const Dataflow_Ring_Plan *plan,
			     const Dataflow_Ring_Streams *streams, const Dataflow_Block_Memory *adopted,
			     const Dataflow_Ring_Disk *disk)
{
	const Dataflow_Llama_Config *cfg = dataflow_blocked_model_config(x->model);
	x->N = dataflow_blocked_model_num_blocks(x->model);
	x->L = x->N - 2;
	x->tied = cfg->tie_embeddings;
	x->H = cfg->hidden_size;
	x->kvd = cfg->num_kv_heads * cfg->head_dim;
	x->es = cfg->dtype == DATAFLOW_BF16 ? 2 : 4;
	x->blocks = calloc((size_t)x->N, sizeof(Ring_Block));
	if (!x->blocks)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "ring executor: host allocation failed");
	for (int b = 0; b < x->N; b++) {
		Dataflow_Block_Sizes sizes;
		TRY(dataflow_blocked_model_block_sizes(x->model, b, &sizes));
		x->blocks[b].numel = sizes.numel;
		memcpy(x->blocks[b].bytes, sizes.bytes, sizeof(sizes.bytes));
	}
	TRY(check_streams(x, streams));
	TRY(check_plan(x, plan));
	if (adopted) {
		TRY(check_adopted(x, plan, adopted));
		if (!(x->adopted = malloc((size_t)x->N * sizeof(*x->adopted))))
			return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "ring executor: host allocation failed");
		memcpy(x->adopted, adopted, (size_t)x->N * sizeof(*x->adopted));
	}
	x->plan = *plan;
	x->master = plan->master_weights;
	x->state = plan->optimizer_state;
	for (int b = 0; b < x->N; b++) { /* m and v as stored (ZeRO-1: this rank's part and the tail, master too) */
		int64_t numel = dataflow_shard_numel(x->blocks[b].numel, plan->shard_ranks);
		x->blocks[b].bytes[DATAFLOW_BLOCK_ADAM_M] = x->blocks[b].bytes[DATAFLOW_BLOCK_ADAM_V] =
			dataflow_optimizer_state_bytes(x->state, numel);
		if (x->master)
			x->blocks[b].bytes[DATAFLOW_BLOCK_MASTER] = 4 * numel;
	}
	TRY(ring_disk_open(x, disk));
	x->T = plan->chunk_tokens;
	x->K = plan->chunks_per_round;
	x->W = plan->weight_slots;
	x->G = plan->grad_slots;
	/* chunks hold whole sequences: up to T / seq_len documents, and some slack for ragged ones;
	 * a K/V context's {0, past + T} (Dataflow_Block_KV.cu_k) after the batch */
	int64_t docs = x->T / plan->seq_len + 64;
	x->batch_numel = dataflow_batch_buffer_numel(x->T, docs < x->T ? docs : x->T, 1) + (plan->kv_context ? 2 : 0);
	int64_t K = x->K;
	x->wslot = calloc((size_t)x->W, sizeof(void *));
	x->wslot_layer = malloc((size_t)x->W * sizeof(int));
	x->wslot_track = calloc((size_t)x->W, sizeof(Track));
	x->gslot = calloc((size_t)x->G, sizeof(void *));
	x->gslot_track = calloc((size_t)x->G, sizeof(Track));
	x->acts = calloc((size_t)x->L, sizeof(Ring_Acts));
	x->dev_batch = calloc((size_t)K, sizeof(int32_t *));
	x->batch_track = calloc((size_t)K, sizeof(Track));
	x->host_allocs = calloc((size_t)(5 * x->N + 3 * x->L + 8), sizeof(void *));
	for (int set = 0; set < 2; set++) {
		x->hid[set] = calloc((size_t)K, sizeof(void *));
		x->hid_track[set] = calloc((size_t)K, sizeof(Track));
		x->kv_stage_tracks[set] = calloc((size_t)K, sizeof(Track));
	}
	if (!x->kv_stage_tracks[0] || !x->kv_stage_tracks[1] || !x->wslot || !x->wslot_layer || !x->wslot_track || !x->gslot || !x->gslot_track || !x->acts ||
	    !x->dev_batch || !x->batch_track || !x->host_allocs || !x->hid[0] || !x->hid[1] || !x->hid_track[0] ||
	    !x->hid_track[1])
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "ring executor: host allocation failed");
	for (int i = 0; i < x->W; i++)
		x->wslot_layer[i] = -1;
	x->edge_stage_block = -1;
	for (int l = 0; l < x->L; l++) {
		x->acts[l].on_device = plan->activations_on_device[l] != 0;
		x->acts[l].level = plan->save_level[l];
		if (!x->acts[l].on_device && !(x->acts[l].tracks = calloc((size_t)K, sizeof(Track))))
			return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "ring executor: host allocation failed");
	}
	int64_t bytes = layout(x, NULL);
	Dataflow_Memory_Info info;
	TRY(dataflow_memory_info(x->h, &info));
	if ((uint64_t)bytes > info.capacity_bytes - info.in_use_bytes || (uint64_t)bytes > plan->device_capacity)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
					  "ring executor: the plan needs %lld bytes of device memory (its capacity: %llu); "
					  "the handle has %llu of %llu bytes free",
					  (long long)bytes, (unsigned long long)plan->device_capacity,
					  (unsigned long long)(info.capacity_bytes - info.in_use_bytes),
					  (unsigned long long)info.capacity_bytes);
	TRY(dataflow_alloc_mem(x->h, (uint64_t)bytes, &x->arena));
	x->device_bytes = (uint64_t)bytes;
	layout(x, x->arena);
	TRY(host_arrays(x));
	if (x->host_bytes > plan->host_capacity)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
					  "ring executor: the plan needs %llu bytes of host memory, more than its host "
					  "capacity of %llu bytes",
					  (unsigned long long)x->host_bytes, (unsigned long long)plan->host_capacity);
	return zero_device_state(x);
}

static Dataflow_Status make(Dataflow_Handle *handle, const Dataflow_Blocked_Model *model, const Dataflow_Ring_Plan *plan,
			    const Dataflow_Ring_Streams *streams, const Dataflow_Block_Memory *adopted,
			    const Dataflow_Ring_Disk *disk, Dataflow_Ring_Executor **executor)
{
	*executor = NULL;
	Dataflow_Ring_Executor *x = calloc(1, sizeof(*x));
	if (!x)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "ring executor: host allocation failed");
	x->h = handle;
	x->model = model;
	Dataflow_Status st = build(x, plan, streams, adopted, disk);
	if (st != DATAFLOW_OK) {
		char message[1024];
		strncpy(message, dataflow_last_error(), sizeof(message) - 1);
		message[sizeof(message) - 1] = 0;
		dataflow_ring_executor_destroy(x);
		return dataflow_set_error(st, "%s", message);
	}
	*executor = x;
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_ring_executor_create(Dataflow_Handle *handle, const Dataflow_Blocked_Model *model,
					      const Dataflow_Ring_Plan *plan, const Dataflow_Ring_Streams *streams,
					      Dataflow_Ring_Executor **executor)
{
	if (!handle || !model || !plan || !executor)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring executor create: handle, model, plan and executor are required");
	return make(handle, model, plan, streams, NULL, NULL, executor);
}

Dataflow_Status dataflow_ring_executor_create_with_disk(Dataflow_Handle *handle, const Dataflow_Blocked_Model *model,
							const Dataflow_Ring_Plan *plan, const Dataflow_Ring_Streams *streams,
							const Dataflow_Ring_Disk *disk, Dataflow_Ring_Executor **executor)
{
	if (!handle || !model || !plan || !executor)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring executor create: handle, model, plan and executor are required");
	return make(handle, model, plan, streams, NULL, disk, executor);
}

Dataflow_Status dataflow_ring_executor_adopt(Dataflow_Handle *handle, const Dataflow_Blocked_Model *model,
					     const Dataflow_Ring_Plan *plan, const Dataflow_Ring_Streams *streams,
					     const Dataflow_Block_Memory *blocks, Dataflow_Ring_Executor **executor)
{
	if (!handle || !model || !plan || !blocks || !executor)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring executor adopt: handle, model, plan, blocks and executor are required");
	return make(handle, model, plan, streams, blocks, NULL, executor);
}

void dataflow_ring_executor_destroy(Dataflow_Ring_Executor *x)
{
	if (!x)
		return;
	dataflow_sync_handle(x->h);
	if (x->arena)
		dataflow_free_mem(x->h, x->arena);
	ring_disk_close(x);
	for (int i = 0; i < x->num_host_allocs; i++) {
		dataflow_disable_access_to_host_mem(x->h, x->host_allocs[i]);
		free(x->host_allocs[i]);
	}
	for (int l = 0; x->acts && l < x->L; l++)
		free(x->acts[l].tracks);
	for (int set = 0; set < 2; set++) {
		free(x->hid[set]);
		free(x->hid_track[set]);
		free(x->kv_stage_tracks[set]);
	}
	free(x->host_allocs);
	free(x->acts);
	free(x->dev_batch);
	free(x->batch_track);
	free(x->wslot);
	free(x->wslot_layer);
	free(x->wslot_track);
	free(x->gslot);
	free(x->gslot_track);
	free(x->blocks);
	free(x->adopted);
	free(x);
}

uint64_t dataflow_ring_executor_device_bytes(const Dataflow_Ring_Executor *x)
{
	return x ? x->device_bytes : 0;
}

uint64_t dataflow_ring_executor_host_bytes(const Dataflow_Ring_Executor *x)
{
	return x ? x->host_bytes : 0;
}

static Dataflow_Status check_kind(const Dataflow_Ring_Executor *x, int block, Dataflow_Block_Kind kind, const void *p,
				  const char *call)
{
	if (!x || !p)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring executor %s: executor and buffer are required",
					  call);
	if (block < 0 || block >= x->N || (int)kind < 0 || kind >= DATAFLOW_BLOCK_NUM_KINDS)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring executor %s: block must be in [0, %d) and kind in [0, %d), got %d and %d", call,
					  x->N, DATAFLOW_BLOCK_NUM_KINDS, block, (int)kind);
	if (kind == DATAFLOW_BLOCK_MASTER && !x->master)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring executor %s: the plan keeps no fp32 master weights", call);
	return DATAFLOW_OK;
}

int dataflow_ring_executor_on_device(const Dataflow_Ring_Executor *x, int block, Dataflow_Block_Kind kind)
{
	if (check_kind(x, block, kind, x, "on_device") != DATAFLOW_OK)
		return -1;
	return x->blocks[block].dev[kind] != NULL;
}

Dataflow_Status dataflow_ring_executor_read(Dataflow_Ring_Executor *x, int block, Dataflow_Block_Kind kind, void *dst)
{
	TRY(check_kind(x, block, kind, dst, "read"));
	TRY(dataflow_ring_executor_wait(x));
	const Ring_Block *blk = &x->blocks[block];
	if (x->plan.shard_ranks > 1 && kind >= DATAFLOW_BLOCK_ADAM_M)
		return ring_sharded_state_copy(x, block, kind, dst, 0);
	if (ring_disk_holds(x, kind))
		return ring_disk_copy(x, block, kind, dst, 0);
	if (!blk->dev[kind] && kind == DATAFLOW_BLOCK_GRAD)
		ring_host_grad_read(x, block, dst);
	else if (!blk->dev[kind])
		memcpy(dst, blk->host[kind], (size_t)blk->bytes[kind]);
	if (!blk->dev[kind])
		return DATAFLOW_OK;
	TRY(dataflow_submit_outbound_transfer(x->h, x->s[RS_OUT], dst, blk->dev[kind], (uint64_t)blk->bytes[kind]));
	return dataflow_sync_stream(x->h, x->s[RS_OUT]);
}

Dataflow_Status dataflow_ring_executor_write(Dataflow_Ring_Executor *x, int block, Dataflow_Block_Kind kind,
					     const void *src)
{
	TRY(check_kind(x, block, kind, src, "write"));
	TRY(dataflow_ring_executor_wait(x));
	Ring_Block *blk = &x->blocks[block];
	if (x->plan.shard_ranks > 1 && kind >= DATAFLOW_BLOCK_ADAM_M)
		return ring_sharded_state_copy(x, block, kind, (void *)src, 1);
	if (ring_disk_holds(x, kind))
		return ring_disk_copy(x, block, kind, (void *)src, 1);
	void *at = blk->dev[kind] ? blk->dev[kind] : blk->host[kind];
	if (blk->dev[kind])
		TRY(dataflow_submit_inbound_transfer(x->h, x->s[RS_IN], at, src, (uint64_t)blk->bytes[kind]));
	else if (kind == DATAFLOW_BLOCK_GRAD)
		ring_host_grad_write(x, block, src);
	else
		memcpy(at, src, (size_t)blk->bytes[kind]);
	if (kind == DATAFLOW_BLOCK_PARAM) {
		if (ring_disk_holds(x, DATAFLOW_BLOCK_MASTER)) {
			TRY(dataflow_sync_stream(x->h, x->s[RS_IN])); /* the param is in place */
			TRY(ring_disk_set_master(x, block, at));
		} else if (x->master) {
			void *master = blk->dev[DATAFLOW_BLOCK_MASTER] ? blk->dev[DATAFLOW_BLOCK_MASTER]
								       : blk->host[DATAFLOW_BLOCK_MASTER];
			TRY(dataflow_sync_stream(x->h, x->s[RS_IN])); /* the param is in place */
			TRY(x->plan.shard_ranks > 1 ? ring_sharded_set_master(x, block)
						    : dataflow_submit_cast(x->h, x->s[RS_OPT], DATAFLOW_BF16, DATAFLOW_FP32,
									   blk->numel, at, master));
		}
		blk->param_stale = blk->train_param && !blk->dev[DATAFLOW_BLOCK_PARAM];
		for (int i = 0; i < x->W; i++)
			if (x->wslot_layer[i] == block - 1)
				x->wslot_layer[i] = -1;
		if (x->edge_stage_block == block)
			x->edge_stage_block = -1;
	}
	return dataflow_ring_executor_wait(x);
}

Dataflow_Status dataflow_ring_executor_wait(Dataflow_Ring_Executor *x)
{
	if (!x)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring executor wait: executor is required");
	for (int r = 0; r < RS_NUM; r++) {
		int seen = 0;
		for (int q = 0; q < r; q++)
			seen |= x->s[q] == x->s[r];
		if (!seen)
			TRY(dataflow_sync_stream(x->h, x->s[r]));
	}
	x->batches_in_flight = 0;
	TRY(ring_disk_status(x));
	return dataflow_trace_sample(x->trace, x->h, x->host_bytes);
}

Dataflow_Status dataflow_ring_executor_wait_losses(Dataflow_Ring_Executor *x)
{
	if (!x)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring executor wait_losses: executor is required");
	TRY(dataflow_sync_stream(x->h, x->s[RS_OUT]));
	return dataflow_trace_sample(x->trace, x->h, x->host_bytes);
}

Dataflow_Status dataflow_ring_executor_outputs(const Dataflow_Ring_Executor *x, Dataflow_Ring_Outputs *out)
{
	if (!x || !out)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring executor outputs: executor and outputs are required");
	out->token_losses = x->host_losses;
	out->num_chunks = x->last_chunks;
	out->chunk_tokens = x->T;
	out->grad_norm = x->host_norm;
	out->router_loss = x->host_router_loss;
	return DATAFLOW_OK;
}
