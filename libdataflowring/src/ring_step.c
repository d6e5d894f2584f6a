/* The executor's training pass: per round, the embedding, every layer layer-major over the
 * round's chunks (weights prefetched into the slot the finished layer frees, activations kept
 * or offloaded), the head at the turn, the layers back down (slots reversed, offloaded
 * activations prefetched through the staging ring, gradients zeroed or brought back before a
 * layer and sent home after it) and the embedding's gradient. With a K/V context, a document's
 * pieces attend over the keys and values of their earlier ones and go back down in reverse.
 * Everything is enqueued; streams wait only on the tracks of the buffers they use. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ring_exec_internal.h"

/* A device buffer and the track that orders its uses. */
typedef struct {
	void *ptr;
	Track *track;
} Buf;

typedef struct {
	Dataflow_Ring_Executor *x;
	int64_t first_chunk;                  /* chunks of the call before this round */
	int64_t num;                          /* chunks in this round */
	const Dataflow_Ring_Chunk *chunks;    /* this round's */
	Dataflow_Llama_Batch *batch;          /* per chunk, filled at the round's start */
	int64_t *doc_first;                   /* per chunk: the round's chunk its document starts in */
	int64_t *order;                       /* the backward's chunk order (a document's pieces reversed) */
	int zero_grads;                       /* first round of a call that does not accumulate */
	int first_round, last_round;          /* of the call */
	float loss_scale;
	int64_t rounds;                       /* of the call */
	Dataflow_Block_Router_Loss router;    /* HF's load-balancing loss of the round (x->router_stats) */
	int dcur;                             /* the hidden set holding dy of the next layer down */
} Round;

/* A transfer in (out), labelled for the trace with what it moves, whose, which chunk. */
static Dataflow_Status copy_in(Dataflow_Ring_Executor *x, Buf dst, Track *host_track, const void *src, int64_t bytes,
			       Dataflow_Ring_Work what, int block, int64_t chunk)
{
	Dataflow_Trace_Span *span;
	TRY(track_before(x, dst.track, RS_IN));
	TRY(track_before(x, host_track, RS_IN));
	TRY(ring_span_begin(x, RS_IN, what, block, chunk, (uint64_t)bytes, &span));
	TRY(dataflow_submit_inbound_transfer(x->h, x->s[RS_IN], dst.ptr, src, (uint64_t)bytes));
	TRY(ring_span_end(x, span));
	TRY(track_after(x, dst.track, RS_IN));
	return track_after(x, host_track, RS_IN);
}

static Dataflow_Status copy_out(Dataflow_Ring_Executor *x, void *dst, Track *host_track, Buf src, int64_t bytes,
				Dataflow_Ring_Work what, int block, int64_t chunk)
{
	if (bytes == 0) /* e.g. the saved activations of DATAFLOW_SAVE_INPUT */
		return DATAFLOW_OK;
	Dataflow_Trace_Span *span;
	TRY(track_before(x, src.track, RS_OUT));
	TRY(track_before(x, host_track, RS_OUT));
	TRY(ring_span_begin(x, RS_OUT, what, block, chunk, (uint64_t)bytes, &span));
	TRY(dataflow_submit_outbound_transfer(x->h, x->s[RS_OUT], dst, src.ptr, (uint64_t)bytes));
	TRY(ring_span_end(x, span));
	TRY(track_after(x, src.track, RS_OUT));
	return track_after(x, host_track, RS_OUT);
}

/* Block b's weights on the device, loaded if they are not (layers: into slot l % W). */
static Dataflow_Status param_of(Dataflow_Ring_Executor *x, int b, Buf *out)
{
	Ring_Block *blk = &x->blocks[b];
	int64_t bytes = blk->bytes[DATAFLOW_BLOCK_PARAM];
	Track *home = &blk->host_track[DATAFLOW_BLOCK_PARAM];
	if (blk->train_param) {
		*out = (Buf){blk->train_param, &blk->dev_track[DATAFLOW_BLOCK_PARAM]};
		if (blk->param_stale) /* a host optimizer updated the home copy */
			TRY(copy_in(x, *out, home, blk->host[DATAFLOW_BLOCK_PARAM], bytes, DATAFLOW_RING_WORK_WEIGHTS_IN, b, -1));
		blk->param_stale = 0;
		return DATAFLOW_OK;
	}
	if (b == 0 || b == x->N - 1) {
		*out = (Buf){x->edge_stage, &x->edge_track};
		if (x->edge_stage_block != b)
			TRY(copy_in(x, *out, home, blk->host[DATAFLOW_BLOCK_PARAM], bytes, DATAFLOW_RING_WORK_WEIGHTS_IN, b, -1));
		x->edge_stage_block = b;
		return DATAFLOW_OK;
	}
	int slot = (b - 1) % x->W;
	*out = (Buf){x->wslot[slot], &x->wslot_track[slot]};
	if (x->wslot_layer[slot] != b - 1)
		TRY(copy_in(x, *out, home, blk->host[DATAFLOW_BLOCK_PARAM], bytes, DATAFLOW_RING_WORK_WEIGHTS_IN, b, -1));
	x->wslot_layer[slot] = b - 1;
	return DATAFLOW_OK;
}

/* Where block b's gradient accumulates during training. */
static Buf grad_of(Dataflow_Ring_Executor *x, int b)
{
	Ring_Block *blk = &x->blocks[b];
	if (blk->train_grad)
		return (Buf){blk->train_grad, &blk->dev_track[DATAFLOW_BLOCK_GRAD]};
	if (b == 0 || b == x->N - 1) {
		x->edge_stage_block = x->edge_stage_block == b ? b : -1; /* keeps its param only if it is b's */
		return (Buf){(char *)x->edge_stage + ring_align64(blk->bytes[DATAFLOW_BLOCK_PARAM]), &x->edge_track};
	}
	int slot = (b - 1) % x->G;
	return (Buf){x->gslot[slot], &x->gslot_track[slot]};
}

/* Before block b's first gradient of the round: zero it or bring its partial sum back. A
 * gradient trained in a fixed device buffer whose home is on the host (a host optimizer) keeps
 * its partial sum there across the call's rounds: in at the first, home after the last. One
 * living on the device is zeroed here too, not at the call's start: its block's update may
 * still be reading it under this step's forward. */
static Dataflow_Status grad_begin(Round *r, int b)
{
	Dataflow_Ring_Executor *x = r->x;
	Ring_Block *blk = &x->blocks[b];
	if ((blk->dev[DATAFLOW_BLOCK_GRAD] && !r->zero_grads) || (blk->train_grad && !r->first_round))
		return DATAFLOW_OK; /* lives on the device, or stays there */
	Buf g = grad_of(x, b);
	if (r->zero_grads) {
		Dataflow_Trace_Span *span;
		TRY(track_before(x, g.track, RS_COMPUTE));
		TRY(ring_span_begin(x, RS_COMPUTE, DATAFLOW_RING_WORK_ZERO_GRAD, b, -1, 0, &span));
		TRY(dataflow_set_mem(x->h, x->s[RS_COMPUTE], g.ptr, 0, (uint64_t)blk->bytes[DATAFLOW_BLOCK_GRAD]));
		TRY(ring_span_end(x, span));
		return track_after(x, g.track, RS_COMPUTE);
	}
	return ring_grad_move(x, b, g.ptr, g.track, 0);
}

/* After block b's last gradient of the round: summed over the ranks (data-parallel, once it is
 * final: the call's last round), then sent home. */
static Dataflow_Status grad_end(Round *r, int b)
{
	Dataflow_Ring_Executor *x = r->x;
	Ring_Block *blk = &x->blocks[b];
	if (x->comm && r->last_round) {
		Buf g = grad_of(x, b);
		TRY(ring_sum_grad(x, b, g.ptr, g.track));
	}
	if (blk->dev[DATAFLOW_BLOCK_GRAD] || (blk->train_grad && !r->last_round))
		return DATAFLOW_OK;
	Buf g = grad_of(x, b);
	return ring_grad_move(x, b, g.ptr, g.track, 1);
}

/* compute is about to use (then has used) these buffers */
static Dataflow_Status compute_uses(Dataflow_Ring_Executor *x, Buf *bufs, int n, int after)
{
	for (int i = 0; i < n; i++)
		if (bufs[i].track)
			TRY(after ? track_after(x, bufs[i].track, RS_COMPUTE) : track_before(x, bufs[i].track, RS_COMPUTE));
	return DATAFLOW_OK;
}

/* The input of layer l (l == L: the head's) for chunk c, and its track. */
static Buf hidden(Dataflow_Ring_Executor *x, int l, int64_t c)
{
	if (l < x->L && x->acts[l].on_device)
		return (Buf){x->acts[l].base + c * x->acts[l].stride, NULL};
	return (Buf){x->hid[l % 2][c], &x->hid_track[l % 2][c]};
}

static int64_t saved_bytes(Dataflow_Ring_Executor *x, int l, int64_t T)
{
	int64_t saved;
	dataflow_block_acts_bytes(x->model, 1 + l, x->acts[l].level, T, &saved, NULL, NULL);
	return saved;
}

static Dataflow_Block_Args args_for(Round *r, int64_t c, Dataflow_Save_Level level)
{
	Dataflow_Ring_Executor *x = r->x;
	return (Dataflow_Block_Args){.batch = &r->batch[c], .level = level, .recomputed = x->recomputed,
				     .dacts = x->dacts, .workspace = x->workspace,
				     .router = x->router_stats ? &r->router : NULL};
}

/* Whether the round's chunk after c continues c's document (so c is not its last piece) */
static int continued(const Round *r, int64_t c)
{
	return c + 1 < r->num && r->chunks[c + 1].past > 0;
}

/* Whether chunk c is a piece of a document split over chunks (plan.kv_context), and if so its
 * context in layer l: the document's rows of the layer's K/V from its first chunk's, the shared
 * dK/dV, {0, past + T} after the chunk's batch. */
static int in_context(Round *r, int l, int64_t c, Dataflow_Block_KV *kv)
{
	Dataflow_Ring_Executor *x = r->x;
	const Dataflow_Ring_Chunk *ch = &r->chunks[c];
	if (ch->past == 0 && !continued(r, c))
		return 0;
	int64_t row = r->doc_first[c] * x->T * x->kvd * x->es;
	*kv = (Dataflow_Block_KV){.k = x->acts[l].kv_k + row, .v = x->acts[l].kv_v + row, .past = ch->past,
				  .cu_k = x->dev_batch[c] + dataflow_batch_buffer_numel(ch->num_tokens, ch->num_docs, 1),
				  .dk = x->ctx_dk, .dv = x->ctx_dv};
	return 1;
}

/* compute is about to use (after: has used) layer l's K/V rows of chunk c's document up to c,
 * where they are staging shared with other layers (else only compute touches them) */
static Dataflow_Status kv_uses(Round *r, int l, int64_t c, int after)
{
	Track *t = r->x->acts[l].kv_tracks;
	for (int64_t i = r->doc_first[c]; t && i <= c; i++)
		TRY(after ? track_after(r->x, &t[i], RS_COMPUTE) : track_before(r->x, &t[i], RS_COMPUTE));
	return DATAFLOW_OK;
}

/* Chunk c's own rows of layer l's keys and values: out to the layer's host mirror after its
 * forward, back in before its backward (an offloading layer). */
static Dataflow_Status kv_rows_move(Round *r, int l, int64_t c, int in)
{
	Dataflow_Ring_Executor *x = r->x;
	Ring_Acts *a = &x->acts[l];
	int64_t row = (r->doc_first[c] * x->T + r->chunks[c].past) * x->kvd * x->es;
	int64_t bytes = r->batch[c].num_tokens * x->kvd * x->es;
	char *dev[2] = {a->kv_k + row, a->kv_v + row}, *host[2] = {a->host_k + row, a->host_v + row};
	for (int i = 0; i < 2; i++) {
		Buf rows = {dev[i], &a->kv_tracks[c]};
		TRY(in ? copy_in(x, rows, &a->host_kv_track, host[i], bytes, DATAFLOW_RING_WORK_ACTS_IN, 1 + l,
				 r->first_chunk + c)
		       : copy_out(x, host[i], &a->host_kv_track, rows, bytes, DATAFLOW_RING_WORK_ACTS_OUT, 1 + l,
				  r->first_chunk + c));
	}
	return DATAFLOW_OK;
}

static Dataflow_Status forward_layer(Round *r, int l)
{
	Dataflow_Ring_Executor *x = r->x;
	Ring_Acts *acts = &x->acts[l];
	Buf w;
	TRY(param_of(x, 1 + l, &w));
	TRY(compute_uses(x, &w, 1, 0));
	Dataflow_Block_Memory mem = {.param = w.ptr};
	for (int64_t c = 0; c < r->num; c++) {
		int64_t T = r->batch[c].num_tokens;
		Buf in = hidden(x, l, c), out = hidden(x, l + 1, c), stage = {0};
		Dataflow_Block_Args a = args_for(r, c, acts->level);
		Dataflow_Block_KV kv;
		a.kv = in_context(r, l, c, &kv) ? &kv : NULL;
		a.x = in.ptr;
		a.y = out.ptr;
		if (acts->on_device) {
			a.saved = (char *)in.ptr + ring_x_bytes(x, T);
		} else {
			int st = (int)(x->stage_next++ % 3);
			stage = (Buf){x->stage[st], &x->stage_track[st]};
			a.saved = (char *)stage.ptr + ring_x_bytes(x, T);
		}
		Buf used[3] = {in, out, stage};
		Dataflow_Trace_Span *span;
		TRY(compute_uses(x, used, 3, 0));
		if (a.kv)
			TRY(kv_uses(r, l, c, 0));
		TRY(ring_span_begin(x, RS_COMPUTE, DATAFLOW_RING_WORK_FORWARD, 1 + l, r->first_chunk + c, 0, &span));
		TRY(dataflow_block_forward(x->model, 1 + l, x->s[RS_COMPUTE], &mem, &a));
		TRY(ring_span_end(x, span));
		TRY(compute_uses(x, used, 3, 1));
		if (a.kv)
			TRY(kv_uses(r, l, c, 1));
		if (!acts->on_device) { /* offload x and saved to the chunk's host copy */
			char *home = acts->base + c * acts->stride;
			Track *t = &acts->tracks[c];
			TRY(copy_out(x, home, t, in, T * x->H * x->es, DATAFLOW_RING_WORK_ACTS_OUT, 1 + l, r->first_chunk + c));
			TRY(copy_out(x, home + ring_x_bytes(x, T), t, (Buf){a.saved, stage.track}, saved_bytes(x, l, T),
				     DATAFLOW_RING_WORK_ACTS_OUT, 1 + l, r->first_chunk + c));
			if (a.kv)
				TRY(kv_rows_move(r, l, c, 0));
		}
	}
	return compute_uses(x, &w, 1, 1);
}

/* The backward's offloaded (layer, chunk) items, prefetched two ahead through the staging ring. */
typedef struct {
	int64_t count, issued, first_stage;
	int *layer;
	int64_t *chunk;
} Prefetch;

static Dataflow_Status prefetch_upto(Round *r, Prefetch *p, int64_t upto)
{
	Dataflow_Ring_Executor *x = r->x;
	for (; p->issued < p->count && p->issued <= upto; p->issued++) {
		int l = p->layer[p->issued];
		int64_t c = p->chunk[p->issued], T = r->batch[c].num_tokens;
		int st = (int)((p->first_stage + p->issued) % 3);
		Ring_Acts *acts = &x->acts[l];
		TRY(copy_in(x, (Buf){x->stage[st], &x->stage_track[st]}, &acts->tracks[c], acts->base + c * acts->stride,
			    ring_x_bytes(x, T) + saved_bytes(x, l, T), DATAFLOW_RING_WORK_ACTS_IN, 1 + l,
			    r->first_chunk + c));
	}
	return DATAFLOW_OK;
}

static Dataflow_Status backward_layer(Round *r, int l, Prefetch *p, int64_t *item)
{
	Dataflow_Ring_Executor *x = r->x;
	Ring_Acts *acts = &x->acts[l];
	Buf w, g = grad_of(x, 1 + l);
	TRY(param_of(x, 1 + l, &w));
	TRY(grad_begin(r, 1 + l));
	Buf wg[2] = {w, g};
	TRY(compute_uses(x, wg, 2, 0));
	Dataflow_Block_Memory mem = {.param = w.ptr, .grad = g.ptr};
	for (int64_t c = 0; c < r->num && !acts->on_device; c++) { /* the layer's keys and values back */
		Dataflow_Block_KV kv;
		if (in_context(r, l, c, &kv))
			TRY(kv_rows_move(r, l, c, 1));
	}
	for (int64_t i = 0; i < r->num; i++) {
		int64_t c = r->order[i], T = r->batch[c].num_tokens;
		Buf in = hidden(x, l, c), dy = {x->hid[r->dcur][c], &x->hid_track[r->dcur][c]};
		Buf dx = {x->hid[!r->dcur][c], &x->hid_track[!r->dcur][c]};
		if (!acts->on_device) {
			TRY(prefetch_upto(r, p, *item));
			int st = (int)((p->first_stage + *item) % 3);
			in = (Buf){x->stage[st], &x->stage_track[st]};
		}
		Dataflow_Block_Args a = args_for(r, c, acts->level);
		Dataflow_Block_KV kv;
		a.kv = in_context(r, l, c, &kv) ? &kv : NULL;
		a.x = in.ptr;
		a.saved = (char *)in.ptr + ring_x_bytes(x, T);
		a.dy = dy.ptr;
		a.dx = dx.ptr;
		Buf used[3] = {in, dy, dx};
		Dataflow_Trace_Span *span;
		TRY(compute_uses(x, used, 3, 0));
		if (a.kv)
			TRY(kv_uses(r, l, c, 0));
		TRY(ring_span_begin(x, RS_COMPUTE, DATAFLOW_RING_WORK_BACKWARD, 1 + l, r->first_chunk + c, 0, &span));
		if (a.kv && !continued(r, c)) { /* a document's last piece: first back */
			uint64_t bytes = (uint64_t)((kv.past + T) * x->kvd * 4);
			TRY(dataflow_set_mem(x->h, x->s[RS_COMPUTE], x->ctx_dk, 0, bytes));
			TRY(dataflow_set_mem(x->h, x->s[RS_COMPUTE], x->ctx_dv, 0, bytes));
		}
		TRY(dataflow_block_recompute(x->model, 1 + l, x->s[RS_COMPUTE], &mem, &a));
		TRY(dataflow_block_backward_x(x->model, 1 + l, x->s[RS_COMPUTE], &mem, &a));
		TRY(dataflow_block_backward_w(x->model, 1 + l, x->s[RS_COMPUTE], &mem, &a));
		TRY(ring_span_end(x, span));
		TRY(compute_uses(x, used, 3, 1));
		if (a.kv)
			TRY(kv_uses(r, l, c, 1));
		if (!acts->on_device)
			TRY(prefetch_upto(r, p, ++*item + 1));
	}
	r->dcur = !r->dcur;
	TRY(compute_uses(x, wg, 2, 1));
	return grad_end(r, 1 + l);
}

/* The head at the turn: forward with the loss, backward_x into the first dy, backward_w. */
static Dataflow_Status head(Round *r)
{
	Dataflow_Ring_Executor *x = r->x;
	int b = x->N - 1;
	Buf w, g, emb = {0}, emb_g = {0};
	if (x->tied) { /* the head adds into the embedding's gradient: bring it first */
		TRY(param_of(x, 0, &emb));
		TRY(grad_begin(r, 0));
		emb_g = grad_of(x, 0);
	}
	TRY(param_of(x, b, &w));
	g = grad_of(x, b);
	TRY(grad_begin(r, b));
	Track *losses = &x->losses_track;
	Buf used[5] = {w, g, emb, emb_g, {x->dev_losses, losses}};
	TRY(compute_uses(x, used, 5, 0));
	Dataflow_Block_Memory mem = {.param = w.ptr, .grad = g.ptr}, tied = {.param = emb.ptr, .grad = emb_g.ptr};
	r->dcur = (x->L + 1) % 2;
	for (int64_t c = 0; c < r->num; c++) {
		Buf in = hidden(x, x->L, c), dx = {x->hid[r->dcur][c], &x->hid_track[r->dcur][c]};
		Dataflow_Block_Args a = args_for(r, c, DATAFLOW_SAVE_ALL);
		a.x = in.ptr;
		a.saved = x->head_saved;
		a.dx = dx.ptr;
		a.token_losses = x->dev_losses + c * x->T;
		a.loss_scale = r->loss_scale;
		a.tied = x->tied ? &tied : NULL;
		Buf io[2] = {in, dx};
		Dataflow_Trace_Span *span;
		TRY(compute_uses(x, io, 2, 0));
		TRY(ring_span_begin(x, RS_COMPUTE, DATAFLOW_RING_WORK_HEAD, b, r->first_chunk + c, 0, &span));
		TRY(dataflow_block_forward(x->model, b, x->s[RS_COMPUTE], &mem, &a));
		TRY(dataflow_block_backward_x(x->model, b, x->s[RS_COMPUTE], &mem, &a));
		TRY(dataflow_block_backward_w(x->model, b, x->s[RS_COMPUTE], &mem, &a));
		TRY(ring_span_end(x, span));
		TRY(compute_uses(x, io, 2, 1));
	}
	TRY(compute_uses(x, used, 5, 1));
	for (int64_t c = 0; c < r->num; c++) /* the token losses go home */
		TRY(copy_out(x, x->host_losses + (r->first_chunk + c) * x->T, losses,
			     (Buf){x->dev_losses + c * x->T, losses}, r->batch[c].num_tokens * 4,
			     DATAFLOW_RING_WORK_LOSSES_OUT, b, r->first_chunk + c));
	return grad_end(r, b);
}

static Dataflow_Status embedding(Round *r, int backward)
{
	Dataflow_Ring_Executor *x = r->x;
	Buf w = {0}, g = {0};
	Dataflow_Block_Memory mem = {0};
	if (backward) {
		if (!x->tied)
			TRY(grad_begin(r, 0));
		g = grad_of(x, 0);
		mem.grad = g.ptr;
	} else {
		TRY(param_of(x, 0, &w));
		mem.param = w.ptr;
	}
	Buf wg[2] = {w, g};
	TRY(compute_uses(x, wg, 2, 0));
	for (int64_t c = 0; c < r->num; c++) {
		Buf out = hidden(x, 0, c), dy = {x->hid[r->dcur][c], &x->hid_track[r->dcur][c]};
		Buf io = backward ? dy : out;
		Dataflow_Block_Args a = args_for(r, c, DATAFLOW_SAVE_ALL);
		a.x = NULL;
		if (backward)
			a.dy = dy.ptr;
		else
			a.y = out.ptr;
		Dataflow_Trace_Span *span;
		TRY(compute_uses(x, &io, 1, 0));
		TRY(ring_span_begin(x, RS_COMPUTE, backward ? DATAFLOW_RING_WORK_BACKWARD : DATAFLOW_RING_WORK_FORWARD, 0,
				    r->first_chunk + c, 0, &span));
		TRY(backward ? dataflow_block_backward_w(x->model, 0, x->s[RS_COMPUTE], &mem, &a)
			     : dataflow_block_forward(x->model, 0, x->s[RS_COMPUTE], &mem, &a));
		TRY(ring_span_end(x, span));
		TRY(compute_uses(x, &io, 1, 1));
	}
	TRY(compute_uses(x, wg, 2, 1));
	return backward ? grad_end(r, 0) : DATAFLOW_OK;
}

/* HF's load-balancing loss is one forward pass's (a round's): its statistics start at zero
 * (begin) and, once every layer's forward added its chunks' routing, give the round's loss,
 * added into the call's mean over rounds, which the last round sends home. */
static Dataflow_Status router_loss(Round *r, int begin)
{
	Dataflow_Ring_Executor *x = r->x;
	int s = x->s[RS_COMPUTE];
	const Dataflow_Llama_Config *cfg = dataflow_blocked_model_config(x->model);
	if (begin) {
		r->router = (Dataflow_Block_Router_Loss){.stats = x->router_stats,
							 .d_loss = cfg->router_aux_loss_coef / (float)r->rounds};
		for (int64_t c = 0; c < r->num; c++)
			r->router.tokens += r->chunks[c].num_tokens;
		if (x->comm) /* data-parallel: the global batch's, every rank's round of as many tokens */
			r->router.tokens *= dataflow_comm_size(x->comm);
		TRY(track_before(x, &x->router_track, RS_COMPUTE)); /* the last call's mean went home */
		TRY(dataflow_set_mem(x->h, s, x->router_stats, 0, (uint64_t)(2 * cfg->num_experts * 4)));
		if (r->first_round)
			TRY(dataflow_set_mem(x->h, s, x->router_loss + 1, 0, 4));
		return DATAFLOW_OK;
	}
	if (x->comm) /* each rank adds its share of the global loss's gradient: the sums over ranks are HF's */
		TRY(dataflow_submit_all_reduce(x->comm, s, DATAFLOW_FP32, 2 * cfg->num_experts, x->router_stats,
					       x->router_stats, DATAFLOW_REDUCE_SUM));
	TRY(dataflow_blocked_model_router_loss(x->model, s, &r->router, x->router_loss));
	TRY(dataflow_submit_add(x->h, s, DATAFLOW_FP32, 1, 1.0f, x->router_loss + 1, 1.0f / (float)r->rounds,
				x->router_loss, x->router_loss + 1));
	TRY(track_after(x, &x->router_track, RS_COMPUTE));
	if (!r->last_round)
		return DATAFLOW_OK;
	return copy_out(x, x->host_router_loss, &x->router_track, (Buf){x->router_loss + 1, &x->router_track}, 4,
			DATAFLOW_RING_WORK_LOSSES_OUT, x->N - 1, -1);
}

static Dataflow_Status run_round(Round *r, Prefetch *p)
{
	Dataflow_Ring_Executor *x = r->x;
	for (int64_t c = 0; c < r->num; c++) { /* the round's batches go up, each in one transfer */
		const Dataflow_Ring_Chunk *ch = &r->chunks[c];
		int32_t *host = x->host_batches + (r->first_chunk + c) * x->batch_numel;
		Buf dev = {x->dev_batch[c], &x->batch_track[c]};
		int64_t numel = dataflow_batch_buffer_numel(ch->num_tokens, ch->num_docs, 1) + (x->plan.kv_context ? 2 : 0);
		TRY(copy_in(x, dev, &x->host_batch_track, host, numel * 4, DATAFLOW_RING_WORK_BATCH_IN, -1,
			    r->first_chunk + c));
		r->doc_first[c] = ch->past > 0 ? r->doc_first[c - 1] : c;
		TRY(dataflow_batch_from_buffer(dev.ptr, ch->num_tokens, ch->num_docs, 1, &r->batch[c]));
		TRY(track_before(x, dev.track, RS_COMPUTE));
	}
	if (x->router_stats)
		TRY(router_loss(r, 1));
	TRY(embedding(r, 0));
	for (int l = 0; l < x->L; l++) {
		TRY(forward_layer(r, l));
		if (l + x->W < x->L) { /* the freed slot takes the next layer not yet in one */
			Buf next;
			TRY(param_of(x, 1 + l + x->W, &next));
		}
	}
	if (x->router_stats)
		TRY(router_loss(r, 0));
	TRY(head(r));
	for (int64_t c = 0, end = 0; c < r->num; c = ++end) { /* each document's pieces in reverse */
		while (continued(r, end))
			end++;
		for (int64_t i = end; i >= c; i--)
			r->order[c + end - i] = i;
	}
	p->count = p->issued = 0;
	p->first_stage = x->stage_next;
	for (int l = x->L - 1; l >= 0; l--)
		for (int64_t i = 0; i < r->num && !x->acts[l].on_device; i++) {
			p->layer[p->count] = l;
			p->chunk[p->count++] = r->order[i];
		}
	TRY(prefetch_upto(r, p, 1));
	int64_t item = 0;
	for (int l = x->L - 1; l >= 0; l--) {
		TRY(backward_layer(r, l, p, &item));
		if (l - x->W >= 0) { /* reversed ring: the freed slot takes a layer below */
			Buf next;
			TRY(param_of(x, 1 + l - x->W, &next));
		}
	}
	x->stage_next = p->first_stage + p->count;
	TRY(embedding(r, 1));
	for (int64_t c = 0; c < r->num; c++)
		TRY(track_after(x, &x->batch_track[c], RS_COMPUTE));
	return DATAFLOW_OK;
}

/* Chunk i continues the document of chunk i - 1 (past > 0) correctly; a document is at most
 * seq_len tokens in at most chunks_per_round pieces. */
static Dataflow_Status check_piece(const Dataflow_Ring_Executor *x, const Dataflow_Ring_Chunk *chunks, int64_t i)
{
	const Dataflow_Ring_Chunk *c = &chunks[i], *prev = i > 0 ? &chunks[i - 1] : NULL;
	if (c->past < 0 || (c->past > 0 && !x->plan.kv_context))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring accumulate: chunk %lld has past %lld; past must be 0 %s",
					  (long long)i, (long long)c->past,
					  x->plan.kv_context ? "or more" : "(the plan has no K/V context to continue a document in)");
	if (c->past > 0 && (!prev || c->num_docs != 1 || prev->num_docs != 1 || prev->past + prev->num_tokens != c->past))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring accumulate: chunk %lld continues a document at token %lld, but %s; a continuing "
					  "chunk holds one document and follows the chunk holding its tokens before",
					  (long long)i, (long long)c->past,
					  !prev ? "no chunk precedes it in the call"
					  : c->num_docs != 1 ? "it holds several documents"
					  : prev->num_docs != 1 ? "the chunk before it holds several documents"
								: "the chunk before it ends elsewhere");
	int64_t pieces = 1, first = i;
	while (first > 0 && chunks[first].past > 0)
		first--, pieces++;
	if (c->past > 0 && (c->past + c->num_tokens > x->plan.seq_len || pieces > x->K))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring accumulate: the document of chunks %lld..%lld reaches %lld tokens in %lld "
					  "chunks; the plan's K/V context holds %lld tokens in at most %lld chunks",
					  (long long)first, (long long)i, (long long)(c->past + c->num_tokens), (long long)pieces,
					  (long long)x->plan.seq_len, (long long)x->K);
	return DATAFLOW_OK;
}

static Dataflow_Status check_chunks(const Dataflow_Ring_Executor *x, const Dataflow_Ring_Chunk *chunks, int64_t n,
				    float loss_scale)
{
	int64_t most = x->K * x->plan.rounds_per_step;
	if (!chunks || n < 1 || n > most)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring accumulate: num_chunks must be in [1, %lld] (chunks_per_round x "
					  "rounds_per_step of the plan), got %lld",
					  (long long)most, (long long)n);
	if (!(loss_scale > 0) || !isfinite(loss_scale))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring accumulate: loss_scale must be finite and > 0, got %g", loss_scale);
	int64_t context = x->plan.kv_context ? 2 : 0; /* cu_k after the batch */
	/* a chunk's packed batch must fit its buffer: 3 int32 per token, one per document + 1 */
	int64_t full_chunk_docs = x->batch_numel - context - 3 * x->T - 1;
	for (int64_t i = 0; i < n; i++) {
		const Dataflow_Ring_Chunk *c = &chunks[i];
		if (!c->buffer || c->num_tokens < 1 || c->num_tokens > x->T || c->num_docs < 1 ||
		    c->num_docs > c->num_tokens ||
		    dataflow_batch_buffer_numel(c->num_tokens, c->num_docs, 1) + context > x->batch_numel)
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "ring accumulate: chunk %lld must have a buffer, 1..%lld tokens (the plan's "
						  "chunk_tokens) and 1..min(tokens, %lld) documents (more when it has fewer "
						  "tokens); got %lld tokens, %lld documents",
						  (long long)i, (long long)x->T, (long long)full_chunk_docs,
						  (long long)c->num_tokens, (long long)c->num_docs);
		TRY(check_piece(x, chunks, i));
	}
	return DATAFLOW_OK;
}

/* Chunks of the next round: up to K, whole documents (check_piece: none has more than K pieces). */
static int64_t round_size(const Dataflow_Ring_Chunk *chunks, int64_t n, int64_t K)
{
	int64_t size = 0;
	while (size < n) {
		int64_t end = size + 1;
		while (end < n && chunks[end].past > 0)
			end++;
		if (end > K)
			break;
		size = end;
	}
	return size;
}

Dataflow_Status dataflow_ring_executor_accumulate(Dataflow_Ring_Executor *x, const Dataflow_Ring_Chunk *chunks,
						  int64_t num_chunks, int accumulate_grads, float loss_scale)
{
	if (!x)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring accumulate: executor is required");
	TRY(check_chunks(x, chunks, num_chunks, loss_scale));
	if (x->batches_in_flight) /* the last call's batches are up: their host copy is free */
		TRY(dataflow_sync_stream(x->h, x->s[RS_IN]));
	x->batches_in_flight = 1;
	for (int64_t i = 0; i < num_chunks; i++) {
		int64_t numel = dataflow_batch_buffer_numel(chunks[i].num_tokens, chunks[i].num_docs, 1);
		int32_t *host = x->host_batches + i * x->batch_numel;
		memcpy(host, chunks[i].buffer, (size_t)numel * 4);
		if (x->plan.kv_context) { /* cu_k of the chunk's context */
			host[numel] = 0;
			host[numel + 1] = (int32_t)(chunks[i].past + chunks[i].num_tokens);
		}
	}
	if (ring_optimizer_fenced(x)) /* the optimizer's phase shared the training's memory */
		TRY(ring_barrier(x));
	int64_t items = x->L * x->K;
	Prefetch p = {0};
	p.layer = malloc((size_t)items * sizeof(int));
	p.chunk = malloc((size_t)items * sizeof(int64_t));
	Dataflow_Llama_Batch *batches = malloc((size_t)x->K * sizeof(Dataflow_Llama_Batch));
	int64_t *doc_first = malloc((size_t)x->K * sizeof(int64_t)), *order = malloc((size_t)x->K * sizeof(int64_t));
	int64_t rounds = 0;
	for (int64_t first = 0; first < num_chunks; rounds++)
		first += round_size(chunks + first, num_chunks - first, x->K);
	Dataflow_Status st = p.layer && p.chunk && batches && doc_first && order
				     ? DATAFLOW_OK
				     : dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "ring accumulate: host allocation failed");
	for (int64_t first = 0, num; st == DATAFLOW_OK && first < num_chunks; first += num) {
		num = round_size(chunks + first, num_chunks - first, x->K);
		Round r = {.x = x, .first_chunk = first, .num = num, .chunks = chunks + first, .batch = batches,
			   .doc_first = doc_first, .order = order, .zero_grads = !accumulate_grads && first == 0,
			   .first_round = first == 0, .last_round = first + num >= num_chunks, .loss_scale = loss_scale,
			   .rounds = rounds};
		st = run_round(&r, &p);
	}
	free(p.layer);
	free(p.chunk);
	free(batches);
	free(doc_first);
	free(order);
	x->last_chunks = num_chunks;
	return st;
}
