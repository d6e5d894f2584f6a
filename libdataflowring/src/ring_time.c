/* The model of time. Within a round, each layer's forward (and backward) occupies the three
 * streams at once: compute on its chunks, inbound prefetching the next layer's weights (and,
 * in the backward, its offloaded activations and partial gradient), outbound offloading this
 * layer's activations (forward) or gradient (backward); the layer takes the longest of the
 * three (slots let a transfer run one layer ahead, not more, in this model: conservative).
 * bf16 host gradients are cast on the stream that moves them. The first layer's fetch is not
 * hidden. Phases are summed over rounds. The optimizer: per
 * block, its transfers in and out and its update (device or host AdamW) run concurrently,
 * blocks one after another, after the backward; a host one under the next step's forward
 * (its phase "optimizer (previous step's)" starts at 0 and the forward's lasts at least as
 * long), as the executor runs it.
 * The disk tier is a fourth stream at the disk's rate (reads and writes share it): the bytes of
 * a kind in files move between disk and host staging as they move over the link (weights
 * read where they are fetched, gradients written where they go home and read where they come
 * back), and the optimizer reads and writes the state in files, block by block. */
#include <string.h>

#include "ring_internal.h"

typedef struct {
	double in, compute, out, disk, seconds;
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

static void add(Span *s, double in, double compute, double out, double disk)
{
	s->in += in;
	s->compute += compute;
	s->out += out;
	s->disk += disk;
	double m = max3(in, compute, out);
	s->seconds += m > disk ? m : disk;
}

/* bytes a round moves on the disk (counted for the step's R rounds); returns their seconds */
static double disk_moved(double *step_total, double R, double bytes, double rate)
{
	*step_total += R * bytes;
	return bytes / rate;
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
	p->disk_seconds = s->disk;
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
	double in_bytes = 0, out_bytes = 0, disk_read = 0, disk_write = 0;
	int dp = (c->disk & DATAFLOW_RING_DISK_PARAMS) != 0, dg = (c->disk & DATAFLOW_RING_DISK_GRADS) != 0;
	int ds = (c->disk & DATAFLOW_RING_DISK_OPTIMIZER_STATE) != 0;
#define IN(bytes) (in_bytes += R * (bytes), (bytes) / x->h2d)
#define OUT(bytes) (out_bytes += R * (bytes), (bytes) / x->d2h)
	/* disk reads and writes of a round (their seconds) */
#define DREAD(bytes) disk_moved(&disk_read, R, (bytes), x->disk_rate)
#define DWRITE(bytes) disk_moved(&disk_write, R, (bytes), x->disk_rate)
	/* from the second round on, a streamed gradient comes back in to keep accumulating */
	double partial = (R - 1) / R;

	Span fwd = {0}, turn = {0}, bwd = {0}, opt = {0};
	double parts[3];
	forward_parts(x, emb, c, parts);
	double emb_p = emb_res ? 0 : (double)emb->sizes.bytes[DATAFLOW_BLOCK_PARAM];
	add(&fwd, IN(emb_p), parts[2], 0, dp ? DREAD(emb_p) : 0);
	if (!weights_resident) { /* the first layer's weights: nothing to hide behind */
		double first = (double)ring_layer(x, 0)->sizes.bytes[DATAFLOW_BLOCK_PARAM];
		add(&fwd, IN(first), 0, 0, dp ? DREAD(first) : 0);
	}
	for (int l = 0; l < L; l++) {
		const Dataflow_Ring_Block *b = ring_layer(x, l);
		int on_device = l >= L - c->device_layers;
		double acts = tokens * ring_kept_bytes_per_token(x, c, b);
		forward_parts(x, b, c, parts);
		double next = !weights_resident && l + 1 < L ? (double)ring_layer(x, l + 1)->sizes.bytes[DATAFLOW_BLOCK_PARAM] : 0;
		add(&fwd, IN(next), parts[0] + parts[1] + parts[2], on_device ? 0 : OUT(acts), dp ? DREAD(next) : 0);
	}
	/* the head: forward, loss and backward back to back on each chunk */
	forward_parts(x, head, c, parts);
	double head_p = head_res ? 0 : (double)head->sizes.bytes[DATAFLOW_BLOCK_PARAM];
	double head_g = head_res ? 0 : partial * ring_host_grad_bytes(x, head);
	double head_casts = head_res ? 0 : partial * host_grad_cast(x, head);
	double head_in = head_p + head_g;
	/* meanwhile the last layer's offloaded activations and partial gradient come in */
	const Dataflow_Ring_Block *last = ring_layer(x, L - 1);
	if (c->device_layers == 0)
		head_in += tokens * ring_kept_bytes_per_token(x, c, last);
	if (!grads_resident) {
		head_g += partial * ring_host_grad_bytes(x, last);
		head_in += partial * ring_host_grad_bytes(x, last);
		head_casts += partial * host_grad_cast(x, last);
	}
	double head_out = head_res ? 0 : ring_host_grad_bytes(x, head);
	double head_narrow = head_res ? 0 : host_grad_cast(x, head);
	add(&turn, IN(head_in) + head_casts, 3 * parts[0] + 3 * parts[2], OUT(head_out) + head_narrow,
	    (dp ? DREAD(head_p) : 0) + (dg ? DREAD(head_g) + DWRITE(head_out) : 0));
	for (int l = L - 1; l >= 0; l--) {
		const Dataflow_Ring_Block *b = ring_layer(x, l);
		forward_parts(x, b, c, parts);
		Dataflow_Save_Level level = ring_save_level(x, c, b);
		double recompute = level == DATAFLOW_SAVE_INPUT ? parts[0] + parts[1] + parts[2]
				   : level == DATAFLOW_SAVE_ATTENTION ? parts[0] + parts[2] : 0;
		double compute = backward_seconds(parts) + recompute;
		double in = 0, in_p = 0, in_g = 0, casts = 0;
		if (l > 0) { /* prefetch for the layer below: weights not kept over the turn, activations */
			const Dataflow_Ring_Block *p = ring_layer(x, l - 1);
			if (!weights_resident && l - 1 < L - c->weight_slots)
				in_p = (double)p->sizes.bytes[DATAFLOW_BLOCK_PARAM];
			if (l - 1 < L - c->device_layers)
				in += tokens * ring_kept_bytes_per_token(x, c, p);
			if (!grads_resident) {
				in_g = partial * ring_host_grad_bytes(x, p);
				casts = partial * host_grad_cast(x, p);
			}
		}
		double out = grads_resident ? 0 : ring_host_grad_bytes(x, b);
		double narrowing = grads_resident ? 0 : host_grad_cast(x, b);
		add(&bwd, IN(in + in_p + in_g) + casts, compute, OUT(out) + narrowing,
		    (dp ? DREAD(in_p) : 0) + (dg ? DREAD(in_g) + DWRITE(out) : 0));
	}
	forward_parts(x, emb, c, parts);
	double emb_g = emb_res ? 0 : ring_host_grad_bytes(x, emb), emb_cast = emb_res ? 0 : host_grad_cast(x, emb);
	add(&bwd, IN(partial * emb_g) + partial * emb_cast, 2 * parts[2], OUT(emb_g) + emb_cast,
	    dg ? DREAD(partial * emb_g) + DWRITE(emb_g) : 0);
	Span *passes[3] = {&fwd, &turn, &bwd};
	for (int i = 0; i < 3; i++) {
		Span *s = passes[i];
		s->in *= R, s->compute *= R, s->out *= R, s->disk *= R, s->seconds *= R;
	}
#undef IN
#undef OUT
#undef DREAD
#undef DWRITE

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
		/* ZeRO-1: a rank updates its 1/N of the block (the state is counted per rank already) */
		double touched = (2 * p + read_g) / x->shard_ranks + 2 * state, in = 0, out = 0, compute = touched / x->memory_rate;
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
		/* from files: the state; weights and gradients on disk (as the host stores them) as the optimizer reads them */
		int host_reads = c->opt == DATAFLOW_RING_OPT_HOST;
		double rd = (ds ? state : 0) + (dp && (host_reads || !res) ? p : 0) + (dg && (host_reads || !gres) ? hg : 0);
		double wr = (ds ? state : 0) + (dp && (host_reads || !res) ? p : 0);
		disk_read += rd, disk_write += wr;
		add(&opt, in / x->h2d, compute, out / x->d2h + narrowing, (rd + wr) / x->disk_rate);
	}
	/* A host update runs under the next step's forward (the executor's forward of block b waits
	 * only for b's update), beside the device: the forward takes the longer of itself and the
	 * update, each link direction carrying both's transfers; nothing is left after the backward.
	 * A device one shares the device's compute with the forward: counted after the backward, as
	 * is a ZeRO-1 one (fenced: its weight gathers; the collectives' time is not modelled). */
	int under = c->opt == DATAFLOW_RING_OPT_HOST && x->shard_ranks == 1;
	if (under) {
		double in = fwd.in + opt.in, out = fwd.out + opt.out;
		fwd.seconds = max3(fwd.seconds, in > out ? in : out, opt.seconds);
	}
	if (plan) {
		double clock = 0, zero = 0;
		plan->num_phases = 0;
		phase(plan, "forward", &fwd, &clock);
		phase(plan, "head (turn)", &turn, &clock);
		phase(plan, "backward", &bwd, &clock);
		phase(plan, under ? "optimizer (previous step's)" : "optimizer", &opt, under ? &zero : &clock);
		plan->inbound_bytes = ring_clamp_bytes(in_bytes);
		plan->outbound_bytes = ring_clamp_bytes(out_bytes);
		plan->disk_read_bytes = ring_clamp_bytes(disk_read);
		plan->disk_write_bytes = ring_clamp_bytes(disk_write);
	}
	*link_bytes = in_bytes + out_bytes;
	return fwd.seconds + turn.seconds + bwd.seconds + (under ? 0 : opt.seconds);
}
