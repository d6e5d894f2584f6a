/* The executor's trace: spans of work stamped by the streams themselves (a host op before and
 * after each unit, writing the time into the span in place) and memory samples taken on the
 * calling thread. Off by default: then no host op is queued. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ring_exec_internal.h"

enum { SPANS_PER_PAGE = 1024 };

static const char *const work_names[DATAFLOW_RING_NUM_WORK] = {
	[DATAFLOW_RING_WORK_FORWARD] = "forward",	  [DATAFLOW_RING_WORK_HEAD] = "head",
	[DATAFLOW_RING_WORK_BACKWARD] = "backward",	  [DATAFLOW_RING_WORK_ZERO_GRAD] = "zero grad",
	[DATAFLOW_RING_WORK_BATCH_IN] = "batch in",	  [DATAFLOW_RING_WORK_WEIGHTS_IN] = "weights in",
	[DATAFLOW_RING_WORK_GRAD_IN] = "grad in",	  [DATAFLOW_RING_WORK_ACTS_IN] = "activations in",
	[DATAFLOW_RING_WORK_ACTS_OUT] = "activations out", [DATAFLOW_RING_WORK_GRAD_OUT] = "grad out",
	[DATAFLOW_RING_WORK_LOSSES_OUT] = "losses out",	  [DATAFLOW_RING_WORK_SCALE_GRADS] = "scale grads",
	[DATAFLOW_RING_WORK_GRAD_NORM] = "grad norm",	  [DATAFLOW_RING_WORK_ADAMW] = "adamw",
	[DATAFLOW_RING_WORK_OPT_IN] = "optimizer in",	  [DATAFLOW_RING_WORK_OPT_OUT] = "optimizer out",
};

const char *dataflow_ring_work_name(Dataflow_Ring_Work what)
{
	return (int)what >= 0 && what < DATAFLOW_RING_NUM_WORK ? work_names[what] : NULL;
}

static double now_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* a host op: the stream has reached this point */
static void stamp(void *at)
{
	*(double *)at = now_seconds();
}

static Dataflow_Ring_Trace_Span *span_at(const Ring_Trace *t, int64_t i)
{
	return &t->pages[i / SPANS_PER_PAGE][i % SPANS_PER_PAGE];
}

static Dataflow_Status new_span(Ring_Trace *t, Dataflow_Ring_Trace_Span **span)
{
	if (t->num_spans == t->num_pages * SPANS_PER_PAGE) {
		Dataflow_Ring_Trace_Span **pages = realloc(t->pages, (size_t)(t->num_pages + 1) * sizeof(*pages));
		Dataflow_Ring_Trace_Span *page = malloc(SPANS_PER_PAGE * sizeof(*page));
		if (pages)
			t->pages = pages;
		if (!pages || !page) {
			free(page);
			return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "ring trace: host allocation failed");
		}
		t->pages[t->num_pages++] = page;
	}
	*span = span_at(t, t->num_spans++);
	return DATAFLOW_OK;
}

Dataflow_Status ring_span_begin(Dataflow_Ring_Executor *x, int role, Dataflow_Ring_Work what, int block, int64_t chunk,
				uint64_t bytes, Dataflow_Ring_Trace_Span **span)
{
	*span = NULL;
	if (!x->trace.on)
		return DATAFLOW_OK;
	Dataflow_Ring_Trace_Span *s = NULL;
	TRY(new_span(&x->trace, &s));
	*s = (Dataflow_Ring_Trace_Span){role, what, block, chunk, bytes, x->trace.step, 0, 0};
	TRY(dataflow_submit_host_op(x->h, stamp, &s->start, x->s[role]));
	*span = s;
	return DATAFLOW_OK;
}

Dataflow_Status ring_span_end(Dataflow_Ring_Executor *x, Dataflow_Ring_Trace_Span *span)
{
	return span ? dataflow_submit_host_op(x->h, stamp, &span->end, x->s[span->stream]) : DATAFLOW_OK;
}

Dataflow_Status ring_trace_sample(Dataflow_Ring_Executor *x)
{
	Ring_Trace *t = &x->trace;
	if (!t->on)
		return DATAFLOW_OK;
	Dataflow_Memory_Info info;
	TRY(dataflow_memory_info(x->h, &info));
	/* one more each time: a sample per wait, a few per step */
	Dataflow_Ring_Trace_Memory *samples = realloc(t->samples, (size_t)(t->num_samples + 1) * sizeof(*samples));
	if (!samples)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "ring trace: host allocation failed");
	t->samples = samples;
	t->samples[t->num_samples++] =
		(Dataflow_Ring_Trace_Memory){now_seconds(), t->step, info.in_use_bytes, info.peak_bytes, x->host_bytes};
	return DATAFLOW_OK;
}

void ring_trace_next_step(Dataflow_Ring_Executor *x)
{
	x->trace.step++;
}

void ring_trace_free(Ring_Trace *t)
{
	for (int64_t i = 0; i < t->num_pages; i++)
		free(t->pages[i]);
	free(t->pages);
	free(t->samples);
	memset(t, 0, sizeof(*t));
}

Dataflow_Status dataflow_ring_executor_trace_start(Dataflow_Ring_Executor *x)
{
	if (!x)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring trace_start: executor is required");
	TRY(dataflow_ring_executor_wait(x)); /* queued spans stamp into the pages freed below */
	ring_trace_free(&x->trace);
	x->trace.on = 1;
	x->trace.step = 1;
	return ring_trace_sample(x);
}

Dataflow_Status dataflow_ring_executor_trace_stop(Dataflow_Ring_Executor *x)
{
	if (!x)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring trace_stop: executor is required");
	x->trace.on = 0;
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_ring_executor_trace_read(Dataflow_Ring_Executor *x, Dataflow_Ring_Trace_Span *spans,
						  int64_t max_spans, Dataflow_Ring_Trace_Memory *samples,
						  int64_t max_samples, int64_t *num_spans, int64_t *num_samples)
{
	if (!x || !num_spans || !num_samples || max_spans < 0 || max_samples < 0 || (max_spans && !spans) ||
	    (max_samples && !samples))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "ring trace_read: executor, num_spans, num_samples and arrays for max_spans (%lld) "
					  "and max_samples (%lld) >= 0 are required",
					  (long long)max_spans, (long long)max_samples);
	int on = x->trace.on;
	x->trace.on = 0; /* wait() would sample */
	Dataflow_Status st = dataflow_ring_executor_wait(x);
	x->trace.on = on;
	TRY(st);
	const Ring_Trace *t = &x->trace;
	for (int64_t i = 0; i < t->num_spans && i < max_spans; i++)
		spans[i] = *span_at(t, i);
	if (t->num_samples && max_samples)
		memcpy(samples, t->samples,
		       (size_t)(t->num_samples < max_samples ? t->num_samples : max_samples) * sizeof(*samples));
	*num_spans = t->num_spans;
	*num_samples = t->num_samples;
	return DATAFLOW_OK;
}
