/* The model of time. Within a round, each layer's forward (and backward) occupies the three
 * streams at once: compute on its chunks, inbound prefetching the next layer's weights (and,
 * in the backward, its offloaded activations and partial gradient), outbound offloading this
 * layer's activations (forward) or gradient (backward); the layer takes the longest of the
 * three (slots let a transfer run one layer ahead, not more, in this model: conservative).
 * bf16 host gradients are cast on the stream that moves them. The first layer's fetch is not
 * hidden. Phases are summed over rounds. The optimizer runs
 * after the backward, as the executor runs it (its apply ends with every stream waiting for the
 * update, so no optimizer overlaps the next step's forward yet): per block, its transfers in
 * and out and its update (device or host AdamW) run concurrently, blocks one after another. */
#include <string.h>

#include "ring_internal.h"

typedef struct {
	double in, compute, out, seconds;
} Span;

/* one forward of a block over `tokens` tokens (whole sequences of S) in chunks of T: matmul,
 * attention, memory-bound parts (seconds) */
static void block_parts(const Dataflow_Ring_Block *b, double tokens, double T, double S, double half,
			double matmul_rate, double attention_rate, double memory_rate, double parts[3])
{
	double pairs = tokens / S * ring_causal_pairs(S, b->attention_window);
	parts[0] = tokens * b->matmul_flops_per_token / (matmul_rate * T / (T + half));
	parts[1] = pairs * b->attention_flops_per_pair / attention_rate;
	parts[2] = tokens * b->memory_bytes_per_token / memory_rate;
}

/* a layer's backward given its forward's parts (recompute not included) */
static double backward_seconds(const double parts[3])
{
	return 2 * parts[0] + 2.5 * parts[1] + 2 * parts[2];
}

/* one forward of a block over a round (a round holds whole sequences) */
static void forward_parts(const Ring_Context *x, const Dataflow_Ring_Block *b, const Ring_Candidate *c,
			  double parts[3])
{
	block_parts(b, (double)(c->chunk * c->chunks_per_round), (double)c->chunk, (double)x->req->seq_len,
		    x->req->profile->matmul_half_tokens, x->matmul_rate, x->attention_rate, x->memory_rate, parts);
}

Dataflow_Status dataflow_ring_layer_seconds(const Dataflow_Device_Profile *profile, const Dataflow_Ring_Block *layer,
					    DataflowDatatype dtype, int64_t seq_len, int64_t tokens, double *seconds)
{
	if (!layer || !seconds)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring layer seconds: layer and seconds are required");
	Dataflow_Status st = dataflow_device_profile_check(profile);
	if (st != DATAFLOW_OK)
		return st;
	if ((dtype != DATAFLOW_BF16 && dtype != DATAFLOW_FP32) || seq_len <= 0 || tokens <= 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring layer seconds: dtype must be bf16 or fp32, seq_len and tokens > 0, got "
					  "dtype %d, %lld and %lld",
					  (int)dtype, (long long)seq_len, (long long)tokens);
	double peak = dataflow_device_profile_peak(profile, dtype), parts[3];
	block_parts(layer, (double)tokens, (double)tokens, (double)seq_len, profile->matmul_half_tokens,
		    peak * profile->matmul_fraction, peak * profile->attention_fraction, profile->memory_bytes_per_sec,
		    parts);
	*seconds = parts[0] + parts[1] + parts[2] + backward_seconds(parts);
	return DATAFLOW_OK;
}

/* bf16 host gradients: the transfer stream that moves a gradient also narrows it going home
 * (reads fp32, writes bf16) or widens it coming in, piece by piece; 0 with fp32 ones */
static double host_grad_cast(const Ring_Context *x, const Dataflow_Ring_Block *b)
{
	if (x->host_grad_ratio >= 1)
		return 0;
	double numel = (double)b->sizes.bytes[DATAFLOW_BLOCK_GRAD] / 4;
	return 6 * numel / x->memory_rate;
}

static double max3(double a, double b, double c)
{
	double m = a > b ? a : b;
	return m > c ? m : c;
}

static void add(Span *s, double in, double compute, double out)
{
	s->in += in;
	s->compute += compute;
	s->out += out;
	s->seconds += max3(in, compute, out);
}

static void phase(Dataflow_Ring_Plan *plan, const char *name, const Span *s, double *clock)
{
	Dataflow_Ring_Phase *p = &plan->phases[plan->num_phases++];
	memset(p, 0, sizeof(*p));
	strncpy(p->name, name, sizeof(p->name) - 1);
	p->start_seconds = *clock;
	p->seconds = s->seconds;
	p->inbound_seconds = s->in;
	p->compute_seconds = s->compute;
	p->outbound_seconds = s->out;
	*clock += s->seconds;
}

double ring_time(const Ring_Context *x, const Ring_Candidate *c, Dataflow_Ring_Plan *plan, double *link_bytes)
{
	const Dataflow_Ring_Model *m = x->model;
	const Dataflow_Ring_Block *emb = &m->blocks[0], *head = &m->blocks[m->num_blocks - 1];
	int L = x->num_layers;
	double R = (double)c->rounds, tokens = (double)(c->chunk * c->chunks_per_round);
	int weights_resident = c->weight_slots >= L, grads_resident = c->grad_slots >= L;
	int emb_res = (c->edge_resident & EDGE_EMBEDDING) != 0, head_res = (c->edge_resident & EDGE_HEAD) != 0;
	double in_bytes = 0, out_bytes = 0;
#define IN(bytes) (in_bytes += R * (bytes), (bytes) / x->h2d)
#define OUT(bytes) (out_bytes += R * (bytes), (bytes) / x->d2h)
	/* from the second round on, a streamed gradient comes back in to keep accumulating */
	double partial = (R - 1) / R;

	Span fwd = {0}, turn = {0}, bwd = {0}, opt = {0};
	double parts[3];
	forward_parts(x, emb, c, parts);
	add(&fwd, emb_res ? 0 : IN((double)emb->sizes.bytes[DATAFLOW_BLOCK_PARAM]), parts[2], 0);
	if (!weights_resident) /* the first layer's weights: nothing to hide behind */
		add(&fwd, IN((double)ring_layer(x, 0)->sizes.bytes[DATAFLOW_BLOCK_PARAM]), 0, 0);
	for (int l = 0; l < L; l++) {
		const Dataflow_Ring_Block *b = ring_layer(x, l);
		int on_device = l >= L - c->device_layers;
		double acts = tokens * ring_kept_bytes_per_token(x, c, b);
		forward_parts(x, b, c, parts);
		double next = !weights_resident && l + 1 < L ? (double)ring_layer(x, l + 1)->sizes.bytes[DATAFLOW_BLOCK_PARAM] : 0;
		add(&fwd, IN(next), parts[0] + parts[1] + parts[2], on_device ? 0 : OUT(acts));
	}
	/* the head: forward, loss and backward back to back on each chunk */
	forward_parts(x, head, c, parts);
	double head_in = head_res ? 0 : (double)head->sizes.bytes[DATAFLOW_BLOCK_PARAM] +
						partial * ring_host_grad_bytes(x, head);
	/* meanwhile the last layer's offloaded activations and partial gradient come in */
	const Dataflow_Ring_Block *last = ring_layer(x, L - 1);
	if (c->device_layers == 0)
		head_in += tokens * ring_kept_bytes_per_token(x, c, last);
	double head_casts = head_res ? 0 : partial * host_grad_cast(x, head);
	if (!grads_resident) {
		head_in += partial * ring_host_grad_bytes(x, last);
		head_casts += partial * host_grad_cast(x, last);
	}
	add(&turn, IN(head_in) + head_casts, 3 * parts[0] + 3 * parts[2],
	    head_res ? 0 : OUT(ring_host_grad_bytes(x, head)) + host_grad_cast(x, head));
	for (int l = L - 1; l >= 0; l--) {
		const Dataflow_Ring_Block *b = ring_layer(x, l);
		forward_parts(x, b, c, parts);
		Dataflow_Save_Level level = ring_save_level(x, c, b);
		double recompute = level == DATAFLOW_SAVE_INPUT ? parts[0] + parts[1] + parts[2]
				   : level == DATAFLOW_SAVE_ATTENTION ? parts[0] + parts[2] : 0;
		double compute = backward_seconds(parts) + recompute;
		double in = 0, casts = 0;
		if (l > 0) { /* prefetch for the layer below: weights not kept over the turn, activations */
			const Dataflow_Ring_Block *p = ring_layer(x, l - 1);
			if (!weights_resident && l - 1 < L - c->weight_slots)
				in += (double)p->sizes.bytes[DATAFLOW_BLOCK_PARAM];
			if (l - 1 < L - c->device_layers)
				in += tokens * ring_kept_bytes_per_token(x, c, p);
			if (!grads_resident) {
				in += partial * ring_host_grad_bytes(x, p);
				casts = partial * host_grad_cast(x, p);
			}
		}
		add(&bwd, IN(in) + casts, compute,
		    grads_resident ? 0 : OUT(ring_host_grad_bytes(x, b)) + host_grad_cast(x, b));
	}
	forward_parts(x, emb, c, parts);
	add(&bwd, emb_res ? 0 : IN(partial * ring_host_grad_bytes(x, emb)) + partial * host_grad_cast(x, emb),
	    2 * parts[2], emb_res ? 0 : OUT(ring_host_grad_bytes(x, emb)) + host_grad_cast(x, emb));
	fwd.in *= R, fwd.compute *= R, fwd.out *= R, fwd.seconds *= R;
	turn.in *= R, turn.compute *= R, turn.out *= R, turn.seconds *= R;
	bwd.in *= R, bwd.compute *= R, bwd.out *= R, bwd.seconds *= R;
#undef IN
#undef OUT

	/* AdamW reads param, grad, m, v (master) and writes param, m, v (master) */
	for (int b = 0; b < m->num_blocks; b++) {
		const Dataflow_Ring_Block *blk = &m->blocks[b];
		int layer = b > 0 && b < m->num_blocks - 1;
		int res = layer ? weights_resident : (c->edge_resident & (b == 0 ? EDGE_EMBEDDING : EDGE_HEAD)) != 0;
		int gres = layer ? grads_resident : res;
		double state = ring_opt_state_bytes(x, blk);
		double p = (double)blk->sizes.bytes[DATAFLOW_BLOCK_PARAM], g = (double)blk->sizes.bytes[DATAFLOW_BLOCK_GRAD];
		double hg = ring_host_grad_bytes(x, blk);
		/* AdamW reads a host gradient as the host stores it (adamw_step takes bf16 gradients) */
		double read_g = gres && c->opt != DATAFLOW_RING_OPT_HOST ? g : hg;
		double touched = 2 * p + read_g + 2 * state, in = 0, out = 0, compute = touched / x->memory_rate;
		double narrowing = 0;
		if (c->opt == DATAFLOW_RING_OPT_HOST) { /* resident weights come back updated, resident grads go out
							  * (narrowed); the host's update counts as the phase's compute */
			in = res ? p : 0, out = gres ? hg : 0;
			compute = touched / x->host_adamw;
			narrowing = gres ? host_grad_cast(x, blk) : 0;
		} else if (c->opt != DATAFLOW_RING_OPT_DEVICE_RESIDENT) {
			in = state + (res ? 0 : p) + (gres ? 0 : hg), out = state + (res ? 0 : p);
		}
		in_bytes += in, out_bytes += out;
		add(&opt, in / x->h2d, compute, out / x->d2h + narrowing);
	}
	if (plan) {
		double clock = 0;
		plan->num_phases = 0;
		phase(plan, "forward", &fwd, &clock);
		phase(plan, "head (turn)", &turn, &clock);
		phase(plan, "backward", &bwd, &clock);
		phase(plan, "optimizer", &opt, &clock);
		plan->inbound_bytes = ring_clamp_bytes(in_bytes);
		plan->outbound_bytes = ring_clamp_bytes(out_bytes);
	}
	*link_bytes = in_bytes + out_bytes;
	return fwd.seconds + turn.seconds + bwd.seconds + opt.seconds;
}
