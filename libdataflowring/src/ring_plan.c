/* The planner's search: every candidate shape of a step (chunk size, chunks per round, save
 * level, and how many top layers save everything instead, optimizer placement, which of embedding/head stay resident, weight slots), each with
 * as many layers' activations on the device as fit; the fastest that fits wins. Candidates do
 * not depend on the capacities, so more memory never gives a slower plan. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ring_internal.h"

#define MAX_TOKENS ((int64_t)1 << 40)

static Dataflow_Status bad(const char *field, const char *expected, double got)
{
	return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring plan: %s must be %s, got %g", field, expected, got);
}

static Dataflow_Status check_block(const Dataflow_Ring_Block *b, int index, Dataflow_Block_Role role)
{
	if (b->sizes.role != role)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring plan: model block %d must have role %d (embedding 0, layer 1, head 2), got %d",
					  index, (int)role, (int)b->sizes.role);
	int64_t v[DATAFLOW_BLOCK_NUM_KINDS + 2 * DATAFLOW_NUM_SAVE_LEVELS + 2];
	int n = 0;
	for (int k = 0; k < DATAFLOW_BLOCK_NUM_KINDS; k++)
		v[n++] = b->sizes.bytes[k];
	for (int s = 0; s < DATAFLOW_NUM_SAVE_LEVELS; s++) {
		v[n++] = b->sizes.saved_bytes_per_token[s];
		v[n++] = b->sizes.recomputed_bytes_per_token[s];
	}
	v[n++] = b->sizes.dacts_bytes_per_token;
	v[n++] = b->kv_bytes_per_token;
	for (int i = 0; i < n; i++)
		if (v[i] < 0)
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "ring plan: model block %d: sizes must be >= 0, got %lld", index,
						  (long long)v[i]);
	if (b->sizes.bytes[DATAFLOW_BLOCK_PARAM] <= 0 || b->sizes.bytes[DATAFLOW_BLOCK_GRAD] <= 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring plan: model block %d: param and grad bytes must be > 0, got %lld and %lld",
					  index, (long long)b->sizes.bytes[DATAFLOW_BLOCK_PARAM],
					  (long long)b->sizes.bytes[DATAFLOW_BLOCK_GRAD]);
	double f[3] = {b->matmul_flops_per_token, b->attention_flops_per_pair, b->memory_bytes_per_token};
	for (int i = 0; i < 3; i++)
		if (!(f[i] >= 0) || !isfinite(f[i]))
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "ring plan: model block %d: flops and bytes per token must be finite and "
						  ">= 0, got %g",
						  index, f[i]);
	return DATAFLOW_OK;
}

static Dataflow_Status check_rate(const char *field, double v)
{
	return v >= 0 && isfinite(v) ? DATAFLOW_OK : bad(field, "finite and >= 0 (0: the default)", v);
}

static Dataflow_Status setup(const Dataflow_Ring_Request *r, Ring_Context *x)
{
	if (!r)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring plan: request and plan are required");
	const Dataflow_Ring_Model *m = r->model;
	if (!m || !m->blocks)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring plan: model (with blocks) is required");
	if (m->num_blocks < 3 || m->num_blocks > DATAFLOW_RING_MAX_LAYERS + 2)
		return bad("model num_blocks (embedding, layers, head)", "in [3, DATAFLOW_RING_MAX_LAYERS + 2]",
			   m->num_blocks);
	for (int b = 0; b < m->num_blocks; b++) {
		Dataflow_Block_Role role = b == 0 ? DATAFLOW_BLOCK_EMBEDDING
					   : b == m->num_blocks - 1 ? DATAFLOW_BLOCK_HEAD : DATAFLOW_BLOCK_LAYER;
		Dataflow_Status st = check_block(&m->blocks[b], b, role);
		if (st != DATAFLOW_OK)
			return st;
	}
	if (m->hidden_bytes_per_token <= 0)
		return bad("model hidden_bytes_per_token", "> 0", (double)m->hidden_bytes_per_token);
	if (m->workspace_fixed_bytes < 0 || m->workspace_bytes_per_token < 0)
		return bad("model workspace bytes", ">= 0",
			   (double)(m->workspace_fixed_bytes < 0 ? m->workspace_fixed_bytes : m->workspace_bytes_per_token));
	if (r->seq_len <= 0 || r->seq_len > ((int64_t)1 << 31))
		return bad("seq_len", "in [1, 2^31]", (double)r->seq_len);
	if (r->tokens_per_step < r->seq_len || r->tokens_per_step > MAX_TOKENS || r->tokens_per_step % r->seq_len)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring plan: tokens_per_step must be a multiple of seq_len (%lld) in [seq_len, 2^40], "
					  "got %lld",
					  (long long)r->seq_len, (long long)r->tokens_per_step);
	if (r->master_weights != 0 && r->master_weights != 1)
		return bad("master_weights", "0 or 1", r->master_weights);
	if (r->master_weights && m->blocks[1].sizes.bytes[DATAFLOW_BLOCK_MASTER] == 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring plan: master_weights needs a bf16 model (this one has no MASTER kind)");
	if (!dataflow_optimizer_state_name(r->optimizer_state))
		return bad("optimizer_state", "fp32 (0), bf16 (1) or 8bit (2)", (double)r->optimizer_state);
	if (!dataflow_host_gradients_name(r->host_gradients))
		return bad("host_gradients", "fp32 (0) or bf16 (1)", (double)r->host_gradients);
	if (r->shard_ranks < 0)
		return bad("shard_ranks", ">= 0", r->shard_ranks);
	if (r->shard_ranks > 1 && (r->optimizer_state != DATAFLOW_OPTIMIZER_STATE_FP32 || r->disk_bytes))
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "ring plan: shard_ranks (ZeRO-1) shards fp32 optimizer state without a disk tier; got "
					  "optimizer_state %s, disk_bytes %llu",
					  dataflow_optimizer_state_name(r->optimizer_state), (unsigned long long)r->disk_bytes);
	if (r->device_bytes == 0)
		return bad("device_bytes", "> 0", 0);
	Dataflow_Status st = check_rate("h2d_bytes_per_sec", r->h2d_bytes_per_sec);
	if (st == DATAFLOW_OK)
		st = check_rate("d2h_bytes_per_sec", r->d2h_bytes_per_sec);
	if (st == DATAFLOW_OK)
		st = check_rate("host_adamw_bytes_per_sec", r->host_adamw_bytes_per_sec);
	if (st == DATAFLOW_OK)
		st = check_rate("disk_bytes_per_sec", r->disk_bytes_per_sec);
	if (st == DATAFLOW_OK && (r->disk_kinds < 0 || r->disk_kinds > 7))
		st = bad("disk_kinds", "DATAFLOW_RING_DISK_* bits (0: all)", r->disk_kinds);
	if (st == DATAFLOW_OK)
		st = dataflow_device_profile_check(r->profile);
	if (st != DATAFLOW_OK)
		return st;

	const Dataflow_Device_Profile *p = r->profile;
	const Dataflow_Ring_Block *first = &m->blocks[1];
	int bf16 = first->sizes.bytes[DATAFLOW_BLOCK_PARAM] * 2 == first->sizes.bytes[DATAFLOW_BLOCK_GRAD];
	memset(x, 0, sizeof(*x));
	x->req = r;
	x->model = m;
	x->num_layers = m->num_blocks - 2;
	x->h2d = r->h2d_bytes_per_sec > 0 ? r->h2d_bytes_per_sec : p->h2d_bytes_per_sec;
	x->d2h = r->d2h_bytes_per_sec > 0 ? r->d2h_bytes_per_sec : p->d2h_bytes_per_sec;
	x->host_adamw = r->host_adamw_bytes_per_sec > 0 ? r->host_adamw_bytes_per_sec : 20e9;
	x->disk_rate = r->disk_bytes_per_sec > 0 ? r->disk_bytes_per_sec : DATAFLOW_RING_DISK_DEFAULT_BYTES_PER_SEC;
	x->peak = dataflow_device_profile_peak(p, bf16 ? DATAFLOW_BF16 : DATAFLOW_FP32);
	x->matmul_rate = x->peak * p->matmul_fraction;
	x->attention_rate = x->peak * p->attention_fraction;
	x->memory_rate = p->memory_bytes_per_sec;
	x->master = r->master_weights;
	x->state = r->optimizer_state;
	x->shard_ranks = r->shard_ranks > 1 ? r->shard_ranks : 1;
	x->host_grad_ratio = r->host_gradients == DATAFLOW_HOST_GRADIENTS_BF16 ? 0.5 : 1;
	x->kv_grad_ratio = bf16 ? 2 : 1;
	for (int l = 0; l < x->num_layers; l++) {
		const Dataflow_Ring_Block *b = ring_layer(x, l);
		if ((double)b->sizes.bytes[DATAFLOW_BLOCK_PARAM] > x->max_param)
			x->max_param = (double)b->sizes.bytes[DATAFLOW_BLOCK_PARAM];
		if ((double)b->sizes.bytes[DATAFLOW_BLOCK_GRAD] > x->max_grad)
			x->max_grad = (double)b->sizes.bytes[DATAFLOW_BLOCK_GRAD];
	}
	return DATAFLOW_OK;
}

enum { MAX_CHOICES = 48 };

static void keep_divisor(int64_t d, int64_t n, int64_t *out, int cap, int *count)
{
	if (*count && d <= out[*count - 1])
		return;
	if (d == n || *count == 0 || (double)d >= 1.5 * (double)out[*count - 1]) {
		if (*count == cap) /* full: the last entry makes way (n is always kept) */
			(*count)--;
		out[(*count)++] = d;
	}
}

/* The divisors of n in ascending order, thinned to a geometric progression (each kept one
 * >= 1.5x the previous, n itself always kept) so the search stays small for any n. */
static int divisors(int64_t n, int64_t *out, int cap)
{
	int count = 0;
	int64_t root = 1;
	while ((root + 1) <= n / (root + 1))
		root++;
	for (int64_t d = 1; d <= root; d++) /* the small ones ascending */
		if (n % d == 0)
			keep_divisor(d, n, out, cap, &count);
	for (int64_t d = root; d >= 1; d--) /* their co-divisors ascending */
		if (n % d == 0)
			keep_divisor(n / d, n, out, cap, &count);
	return count;
}

/* Chunk sizes: whole sequences (1, 2, 4, ... per chunk, dividing the step), and for long
 * sequences pieces of one (seq_len / 2^k, >= 256 tokens) attending over a K/V context. */
static int chunk_choices(const Dataflow_Ring_Request *r, int64_t *out)
{
	int64_t per_seq[MAX_CHOICES];
	int n = divisors(r->tokens_per_step / r->seq_len, per_seq, MAX_CHOICES / 2), count = 0;
	for (int i = 0; i < n; i++)
		out[count++] = per_seq[i] * r->seq_len;
	for (int64_t c = r->seq_len / 2; c >= 256 && r->seq_len % c == 0 && count < MAX_CHOICES; c /= 2)
		out[count++] = c;
	return count;
}

/* Slot counts tried: 2, 3, 4, 6, 9, 13, ... (x1.5) below L, then L (resident). */
static int slot_choices(int L, int *out)
{
	int n = 0;
	for (int s = 2; s < L; s = s < 4 ? s + 1 : s + s / 2)
		out[n++] = s;
	out[n++] = L;
	return n;
}

typedef struct {
	int found;
	double seconds, bytes; /* the best's predicted step and link bytes (in + out) */
	Ring_Candidate best;
	double min_device, min_device_host, min_host_fitting_device;
	double min_disk_fitting_host; /* least disk of plans fitting the device and host (disk tier) */
} Search;

/* Whether a candidate taking t seconds and moving bytes over the link beats the best so far.
 * The model of time is an estimate (bench/ring.py measures it within ~20%), so a plan moving
 * more bytes must be predicted faster by more than DATAFLOW_RING_TIE_MARGIN to win, and one
 * moving fewer wins unless slower by more; equal bytes: the faster, then (equal times, e.g.
 * nothing to transfer) fewer rounds, then larger chunks. */
static int preferred(const Search *s, const Ring_Candidate *c, double t, double bytes)
{
	if (!s->found)
		return 1;
	if (fabs(t - s->seconds) > DATAFLOW_RING_TIE_MARGIN * s->seconds || bytes == s->bytes) {
		if (fabs(t - s->seconds) > 1e-12 * s->seconds)
			return t < s->seconds;
		return c->rounds < s->best.rounds || (c->rounds == s->best.rounds && c->chunk > s->best.chunk);
	}
	return bytes < s->bytes;
}

/* With c's slots, as many layers' activations on the device as fit (more is never slower).
 * Returns 0 when even none fit the device: more slots will not either. */
static int try_candidate(const Ring_Context *x, Ring_Candidate c, Search *s)
{
	int L = x->num_layers;
	double dev, host;
	c.device_layers = 0;
	ring_memory(x, &c, NULL, &dev, &host);
	if (dev < s->min_device || (dev == s->min_device && host < s->min_device_host)) {
		s->min_device = dev;
		s->min_device_host = host;
	}
	if (dev > (double)x->req->device_bytes)
		return 0;
	int lo = 0, hi = L; /* device need grows with device_layers: the largest that fits */
	c.device_layers = L;
	ring_memory(x, &c, NULL, &dev, &host);
	if (dev <= (double)x->req->device_bytes)
		lo = L;
	while (lo < hi) {
		c.device_layers = (lo + hi + 1) / 2;
		ring_memory(x, &c, NULL, &dev, &host);
		if (dev <= (double)x->req->device_bytes)
			lo = c.device_layers;
		else
			hi = c.device_layers - 1;
	}
	c.device_layers = lo;
	int fits = ring_memory(x, &c, NULL, &dev, &host);
	if (host < s->min_host_fitting_device)
		s->min_host_fitting_device = host;
	if (!fits && host <= (double)x->req->host_bytes && c.disk_bytes < s->min_disk_fitting_host)
		s->min_disk_fitting_host = c.disk_bytes; /* only the disk is short */
	if (!fits)
		return 1;
	double bytes, t = ring_time(x, &c, NULL, &bytes);
	int better = preferred(s, &c, t, bytes);
	if (better) {
		s->found = 1;
		s->seconds = t;
		s->bytes = bytes;
		s->best = c;
	}
	return 1;
}

/* c as it is, and with its top layers saving everything (an eighth of the layers at a time):
 * recompute traded for activation memory. Returns try_candidate's answer for c as it is (the
 * least memory of them). */
static int try_save_levels(const Ring_Context *x, Ring_Candidate c, Search *s)
{
	int L = x->num_layers, step = L >= 8 ? L / 8 : 1;
	int fits = try_candidate(x, c, s);
	for (c.high_layers = step; fits && c.level != DATAFLOW_SAVE_ALL && c.high_layers < L; c.high_layers += step)
		try_candidate(x, c, s);
	return fits;
}

/* Every placement of one step shape (chunk, chunks per round): save level, optimizer,
 * resident embedding/head, weight slots (ascending, so the first that does not fit ends them). */
static void search_shape(const Ring_Context *x, Search *s, int64_t C, int64_t K, const int *slots, int num_slots)
{
	int L = x->num_layers, both = EDGE_EMBEDDING | EDGE_HEAD;
	for (int level = 0; level < DATAFLOW_NUM_SAVE_LEVELS; level++)
		for (int opt = 0; opt < DATAFLOW_RING_NUM_OPT; opt++)
			for (int edge = 0; edge < 4; edge++) {
				if ((x->model->tied && edge != 0 && edge != both) || /* a tied head reads the embedding */
				    (opt == DATAFLOW_RING_OPT_DEVICE_RESIDENT && edge != both) ||
				    /* a Trainer's waits would fence it like the streamed one (ring_plan.h) */
				    opt == DATAFLOW_RING_OPT_DEVICE_OVERLAPPED ||
				    /* ZeRO-1 updates a rank's part where its state lives, not through slots */
				    (x->shard_ranks > 1 && opt == DATAFLOW_RING_OPT_DEVICE_STREAMED))
					continue;
				for (int si = 0; si < num_slots; si++) {
					int w = slots[si];
					if (opt == DATAFLOW_RING_OPT_DEVICE_RESIDENT && w < L)
						continue;
					Ring_Candidate c = {C, K, x->req->tokens_per_step / C / K, (Dataflow_Save_Level)level,
							    (Dataflow_Ring_Optimizer)opt, edge, w, w >= L ? L : 2, 0, 0, 0, 0};
					int fits = try_save_levels(x, c, s);
					/* resident weights, streamed grads (resident optimizer state needs both) */
					if (w >= L && L > 2 && opt != DATAFLOW_RING_OPT_DEVICE_RESIDENT) {
						c.grad_slots = 2;
						fits |= try_save_levels(x, c, s);
					}
					if (!fits)
						break;
				}
			}
}

static void search(const Ring_Context *x, Search *s)
{
	const Dataflow_Ring_Request *r = x->req;
	int slots[64];
	int num_slots = slot_choices(x->num_layers, slots);
	int64_t chunks[MAX_CHOICES], per_round[MAX_CHOICES];
	int num_chunks = chunk_choices(r, chunks);
	for (int ci = 0; ci < num_chunks; ci++) {
		int num_k = divisors(r->tokens_per_step / chunks[ci], per_round, MAX_CHOICES);
		for (int ki = 0; ki < num_k; ki++)
			if ((per_round[ki] * chunks[ci]) % r->seq_len == 0) /* a round holds whole sequences */
				search_shape(x, s, chunks[ci], per_round[ki], slots, num_slots);
	}
}

/* Fills `plan` for candidate c: shape, placement, memory maps, timeline, step time and MFU. */
static void fill_plan(const Ring_Context *x, Ring_Candidate *c, Dataflow_Ring_Plan *plan)
{
	double dev, host;
	ring_memory(x, c, plan, &dev, &host);
	plan->disk_capacity = x->req->disk_bytes;
	plan->disk_bytes_per_sec = x->req->disk_bytes ? x->disk_rate : 0;
	plan->seq_len = x->req->seq_len;
	plan->tokens_per_step = x->req->tokens_per_step;
	plan->chunk_tokens = c->chunk;
	plan->chunks_per_round = c->chunks_per_round;
	plan->rounds_per_step = c->rounds;
	plan->kv_context = ring_kv_context(x->req, c);
	plan->num_layers = x->num_layers;
	double params = 0;
	for (int b = 0; b < x->model->num_blocks; b++)
		params += (double)x->model->blocks[b].sizes.bytes[DATAFLOW_BLOCK_PARAM];
	plan->model_param_bytes = ring_clamp_bytes(params);
	plan->num_experts = x->model->num_experts;
	plan->experts_per_tok = x->model->experts_per_tok;
	plan->expert_param_bytes = x->model->expert_param_bytes;
	plan->embedding_resident = (c->edge_resident & EDGE_EMBEDDING) != 0;
	plan->head_resident = (c->edge_resident & EDGE_HEAD) != 0;
	plan->weight_slots = c->weight_slots;
	plan->grad_slots = c->grad_slots;
	for (int l = 0; l < x->num_layers; l++) {
		plan->save_level[l] = ring_save_level(x, c, ring_layer(x, l));
		plan->activations_on_device[l] = l >= x->num_layers - c->device_layers;
	}
	plan->optimizer = c->opt;
	plan->master_weights = x->req->master_weights;
	plan->optimizer_state = x->req->optimizer_state;
	plan->host_gradients = x->req->host_gradients;
	plan->shard_ranks = x->shard_ranks;
	double link_bytes;
	plan->step_seconds = ring_time(x, c, plan, &link_bytes);
	plan->tokens_per_second = (double)x->req->tokens_per_step / plan->step_seconds;
	/* MFU: 6 N per token (N: weights met in matmuls, = matmul_flops_per_token / 2) plus 3x the
	 * causal attention forward (within a sliding window), over the step time at the dtype's peak */
	double S = (double)x->req->seq_len, seqs = (double)x->req->tokens_per_step / S, flops = 0;
	for (int b = 0; b < x->model->num_blocks; b++) {
		const Dataflow_Ring_Block *blk = &x->model->blocks[b];
		flops += 3 * blk->matmul_flops_per_token * (double)x->req->tokens_per_step +
			 3 * blk->attention_flops_per_pair * seqs * ring_causal_pairs(S, blk->attention_window);
	}
	plan->model_flops = flops;
	plan->peak_flops = x->peak;
	plan->mfu = flops / (plan->step_seconds * x->peak);
}

Dataflow_Status dataflow_ring_plan(const Dataflow_Ring_Request *request, Dataflow_Ring_Plan *plan)
{
	if (!plan)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring plan: request and plan are required");
	memset(plan, 0, sizeof(*plan));
	Ring_Context x;
	Dataflow_Status st = setup(request, &x);
	if (st != DATAFLOW_OK)
		return st;
	Search s = {0, 0, 0, {0}, INFINITY, INFINITY, INFINITY, INFINITY};
	search(&x, &s);
	plan->device_capacity = request->device_bytes;
	plan->host_capacity = request->host_bytes;
	plan->min_device_bytes = ring_clamp_bytes(s.min_device);
	plan->min_host_bytes = ring_clamp_bytes(isfinite(s.min_host_fitting_device) ? s.min_host_fitting_device
										    : s.min_device_host);
	if (!s.found) {
		if (isfinite(s.min_disk_fitting_host))
			return ring_disk_short(request, s.min_disk_fitting_host);
		if (isfinite(s.min_host_fitting_device))
			return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
						  "ring plan: nothing fits in %s host memory: plans that fit the %s device "
						  "need at least %s host",
						  ring_bytes_text((double)request->host_bytes).text,
						  ring_bytes_text((double)request->device_bytes).text,
						  ring_bytes_text(s.min_host_fitting_device).text);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
					  "ring plan: nothing fits in %s device memory: the smallest plan needs %s device "
					  "(and %s host)",
					  ring_bytes_text((double)request->device_bytes).text, ring_bytes_text(s.min_device).text,
					  ring_bytes_text(s.min_device_host).text);
	}
	fill_plan(&x, &s.best, plan);
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_ring_plan_resident(const Dataflow_Ring_Request *request, Dataflow_Save_Level save_level,
					    Dataflow_Ring_Plan *plan)
{
	if (!plan)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring plan resident: request and plan are required");
	memset(plan, 0, sizeof(*plan));
	if ((int)save_level < 0 || save_level >= DATAFLOW_NUM_SAVE_LEVELS)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring plan resident: save_level must be in [0, %d), got %d", DATAFLOW_NUM_SAVE_LEVELS,
					  (int)save_level);
	Ring_Context x;
	Dataflow_Status st = setup(request, &x);
	if (st != DATAFLOW_OK)
		return st;
	int L = x.num_layers;
	Ring_Candidate c = {request->tokens_per_step, 1, 1, save_level, DATAFLOW_RING_OPT_DEVICE_RESIDENT,
			    EDGE_EMBEDDING | EDGE_HEAD, L, L, L, 0, 0, 0};
	double dev, host;
	int fits = ring_memory(&x, &c, NULL, &dev, &host);
	plan->device_capacity = request->device_bytes;
	plan->host_capacity = request->host_bytes;
	plan->min_device_bytes = ring_clamp_bytes(dev);
	plan->min_host_bytes = ring_clamp_bytes(host);
	if (!fits)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
					  "ring plan resident: all-resident training on %lld tokens per step needs %s of "
					  "device memory, more than %s",
					  (long long)request->tokens_per_step, ring_bytes_text(dev).text,
					  ring_bytes_text((double)request->device_bytes).text);
	fill_plan(&x, &c, plan);
	return DATAFLOW_OK;
}
