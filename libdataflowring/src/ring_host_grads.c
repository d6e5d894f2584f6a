/* Gradients the host keeps in bf16 (plan.host_gradients): a gradient accumulates in fp32 on the
 * device within a round; going home it is narrowed (cast, round to nearest even) into a device
 * staging buffer that the outbound stream sends; coming back for the next round it lands in a
 * second staging buffer and is widened into the fp32 slot. Round to nearest even rather than
 * stochastic rounding: a round's partial sum is rounded once per round (rounds_per_step - 1
 * times in all, each a relative error <= 2^-9), the same cast op on every backend, and a
 * reference needs no seed. The optimizer reads the bf16 home as it is (adamw_step and
 * grad_norm_sq take bf16 gradients). */
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
	return most;
}

/* compute casts n elements from src to dst, ordered by both buffers' tracks */
static Dataflow_Status cast_on_compute(Dataflow_Ring_Executor *x, DataflowDatatype from, DataflowDatatype to,
				       int64_t n, const void *src, Track *src_track, void *dst, Track *dst_track)
{
	TRY(track_before(x, src_track, RS_COMPUTE));
	TRY(track_before(x, dst_track, RS_COMPUTE));
	TRY(dataflow_submit_cast(x->h, x->s[RS_COMPUTE], from, to, n, src, dst));
	TRY(track_after(x, src_track, RS_COMPUTE));
	return track_after(x, dst_track, RS_COMPUTE);
}

Dataflow_Status ring_grad_send_home(Dataflow_Ring_Executor *x, int b, const void *g, Track *g_track)
{
	Ring_Block *blk = &x->blocks[b];
	int64_t bytes = ring_host_grad_bytes(x, b);
	Track *stage = &x->grad_stage_track[1], *home = &blk->host_track[DATAFLOW_BLOCK_GRAD];
	const void *src = g;
	if (narrow(x, b)) {
		TRY(cast_on_compute(x, DATAFLOW_FP32, DATAFLOW_BF16, blk->numel, g, g_track, x->grad_stage[1], stage));
		src = x->grad_stage[1], g_track = stage;
	}
	Dataflow_Trace_Span *span;
	TRY(track_before(x, g_track, RS_OUT));
	TRY(track_before(x, home, RS_OUT));
	TRY(ring_span_begin(x, RS_OUT, DATAFLOW_RING_WORK_GRAD_OUT, b, -1, (uint64_t)bytes, &span));
	TRY(dataflow_submit_outbound_transfer(x->h, x->s[RS_OUT], blk->host[DATAFLOW_BLOCK_GRAD], src, (uint64_t)bytes));
	TRY(ring_span_end(x, span));
	TRY(track_after(x, g_track, RS_OUT));
	return track_after(x, home, RS_OUT);
}

Dataflow_Status ring_grad_bring_back(Dataflow_Ring_Executor *x, int b, void *g, Track *g_track)
{
	Ring_Block *blk = &x->blocks[b];
	int64_t bytes = ring_host_grad_bytes(x, b);
	Track *stage = &x->grad_stage_track[0], *home = &blk->host_track[DATAFLOW_BLOCK_GRAD];
	void *dst = narrow(x, b) ? x->grad_stage[0] : g;
	Track *dst_track = narrow(x, b) ? stage : g_track;
	Dataflow_Trace_Span *span;
	TRY(track_before(x, dst_track, RS_IN));
	TRY(track_before(x, home, RS_IN));
	TRY(ring_span_begin(x, RS_IN, DATAFLOW_RING_WORK_GRAD_IN, b, -1, (uint64_t)bytes, &span));
	TRY(dataflow_submit_inbound_transfer(x->h, x->s[RS_IN], dst, blk->host[DATAFLOW_BLOCK_GRAD], (uint64_t)bytes));
	TRY(ring_span_end(x, span));
	TRY(track_after(x, dst_track, RS_IN));
	TRY(track_after(x, home, RS_IN));
	if (!narrow(x, b))
		return DATAFLOW_OK;
	return cast_on_compute(x, DATAFLOW_BF16, DATAFLOW_FP32, blk->numel, dst, stage, g, g_track);
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
