/* Gradients the host keeps in bf16 (plan.host_gradients): a gradient accumulates in fp32 on the
 * device within a round; going home the outbound stream narrows it (cast, round to nearest even)
 * piece by piece into a small device staging buffer and sends each piece; coming back for the
 * next round the inbound stream brings each piece into a second one and widens it into the fp32
 * slot. On the transfer streams the casts take no compute time and need no more ordering.
 * Round to nearest even rather than stochastic rounding: deterministic without a seed, the same
 * cast op on every backend, an error of at most 2^-9 of the partial sum per round; stochastic
 * rounding's advantage (no bias when increments fall below half a bf16 step of the sum) needs
 * hundreds of rounds, and a step has at most tens (each round adds about 1/rounds of the sum).
 * The optimizer reads the bf16 home as it is (adamw_step and grad_norm_sq take bf16 gradients). */
#include <string.h>

#include "ring_exec_internal.h"

static int narrow(const Dataflow_Ring_Executor *x, int b)
{
	return x->plan.host_gradients == DATAFLOW_HOST_GRADIENTS_BF16 && !x->blocks[b].dev[DATAFLOW_BLOCK_GRAD];
}

int64_t ring_host_grad_bytes(const Dataflow_Ring_Executor *x, int b)
{
	return narrow(x, b) ? 2 * x->blocks[b].numel : x->blocks[b].bytes[DATAFLOW_BLOCK_GRAD];
}

DataflowDatatype ring_grad_home_dtype(const Dataflow_Ring_Executor *x, int b)
{
	return narrow(x, b) ? DATAFLOW_BF16 : DATAFLOW_FP32;
}

int64_t ring_grad_stage_bytes(const Dataflow_Ring_Executor *x)
{
	int64_t most = 0;
	for (int b = 0; b < x->N; b++)
		if (narrow(x, b) && 2 * x->blocks[b].numel > most)
			most = 2 * x->blocks[b].numel;
	return most < DATAFLOW_RING_GRAD_PIECE_BYTES ? most : DATAFLOW_RING_GRAD_PIECE_BYTES;
}

Dataflow_Status ring_grad_move(Dataflow_Ring_Executor *x, int b, void *g, Track *g_track, int going_home)
{
	Ring_Block *blk = &x->blocks[b];
	int role = going_home ? RS_OUT : RS_IN, s = x->s[role];
	int64_t bytes = ring_host_grad_bytes(x, b), piece = DATAFLOW_RING_GRAD_PIECE_BYTES / 2;
	char *home = blk->host[DATAFLOW_BLOCK_GRAD], *stage = x->grad_stage[going_home];
	Track *home_track = &blk->host_track[DATAFLOW_BLOCK_GRAD];
	Dataflow_Trace_Span *span;
	TRY(track_before(x, g_track, role));
	TRY(track_before(x, home_track, role));
	TRY(ring_span_begin(x, role, going_home ? DATAFLOW_RING_WORK_GRAD_OUT : DATAFLOW_RING_WORK_GRAD_IN, b, -1,
			    (uint64_t)bytes, &span));
	if (!narrow(x, b))
		TRY(going_home ? dataflow_submit_outbound_transfer(x->h, s, home, g, (uint64_t)bytes)
			       : dataflow_submit_inbound_transfer(x->h, s, g, home, (uint64_t)bytes));
	for (int64_t at = 0; narrow(x, b) && at < blk->numel; at += piece) { /* the stream orders the stage's reuse */
		int64_t n = blk->numel - at < piece ? blk->numel - at : piece;
		float *part = (float *)g + at;
		if (going_home) {
			TRY(dataflow_submit_cast(x->h, s, DATAFLOW_FP32, DATAFLOW_BF16, n, part, stage));
			TRY(dataflow_submit_outbound_transfer(x->h, s, home + 2 * at, stage, (uint64_t)(2 * n)));
		} else {
			TRY(dataflow_submit_inbound_transfer(x->h, s, stage, home + 2 * at, (uint64_t)(2 * n)));
			TRY(dataflow_submit_cast(x->h, s, DATAFLOW_BF16, DATAFLOW_FP32, n, stage, part));
		}
	}
	TRY(ring_span_end(x, span));
	TRY(track_after(x, g_track, role));
	return track_after(x, home_track, role);
}

void ring_host_grad_read(const Dataflow_Ring_Executor *x, int b, float *dst)
{
	const Ring_Block *blk = &x->blocks[b];
	if (!narrow(x, b)) {
		memcpy(dst, blk->host[DATAFLOW_BLOCK_GRAD], (size_t)blk->bytes[DATAFLOW_BLOCK_GRAD]);
		return;
	}
	const uint16_t *h = blk->host[DATAFLOW_BLOCK_GRAD];
	for (int64_t i = 0; i < blk->numel; i++)
		dst[i] = dataflow_bf16_to_fp32(h[i]);
}

void ring_host_grad_write(Dataflow_Ring_Executor *x, int b, const float *src)
{
	Ring_Block *blk = &x->blocks[b];
	if (!narrow(x, b)) {
		memcpy(blk->host[DATAFLOW_BLOCK_GRAD], src, (size_t)blk->bytes[DATAFLOW_BLOCK_GRAD]);
		return;
	}
	uint16_t *h = blk->host[DATAFLOW_BLOCK_GRAD];
	for (int64_t i = 0; i < blk->numel; i++)
		h[i] = dataflow_fp32_to_bf16(src[i]);
}
