/* The trace recorder (trace.h): spans stamped in place by host ops on the streams, memory
 * samples taken on the calling thread. Spans live in pages that never move, so the streams
 * stamp them while later spans are added. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dataflow/trace.h"

enum { SPANS_PER_PAGE = 1024 };

struct Dataflow_Trace {
	int on;
	int64_t step;
	Dataflow_Trace_Span **pages;
	int64_t num_spans, num_pages;
	Dataflow_Trace_Memory *samples;
	int64_t num_samples;
};

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

static Dataflow_Trace_Span *span_at(const Dataflow_Trace *t, int64_t i)
{
	return &t->pages[i / SPANS_PER_PAGE][i % SPANS_PER_PAGE];
}

static void discard(Dataflow_Trace *t)
{
	for (int64_t i = 0; i < t->num_pages; i++)
		free(t->pages[i]);
	free(t->pages);
	free(t->samples);
	memset(t, 0, sizeof(*t));
}

Dataflow_Status dataflow_trace_create(Dataflow_Trace **trace)
{
	if (!trace)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "trace create: trace is required");
	*trace = calloc(1, sizeof(**trace));
	return *trace ? DATAFLOW_OK : dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "trace create: host allocation failed");
}

void dataflow_trace_destroy(Dataflow_Trace *t)
{
	if (!t)
		return;
	discard(t);
	free(t);
}

Dataflow_Status dataflow_trace_start(Dataflow_Trace *t)
{
	if (!t)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "trace start: trace is required");
	discard(t);
	t->on = 1;
	t->step = 1;
	return DATAFLOW_OK;
}

void dataflow_trace_stop(Dataflow_Trace *t)
{
	if (t)
		t->on = 0;
}

int dataflow_trace_recording(const Dataflow_Trace *t)
{
	return t && t->on;
}

static Dataflow_Status new_span(Dataflow_Trace *t, Dataflow_Trace_Span **span)
{
	if (t->num_spans == t->num_pages * SPANS_PER_PAGE) {
		Dataflow_Trace_Span **pages = realloc(t->pages, (size_t)(t->num_pages + 1) * sizeof(*pages));
		Dataflow_Trace_Span *page = malloc(SPANS_PER_PAGE * sizeof(*page));
		if (pages)
			t->pages = pages;
		if (!pages || !page) {
			free(page);
			return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "trace: host allocation failed");
		}
		t->pages[t->num_pages++] = page;
	}
	*span = span_at(t, t->num_spans++);
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_trace_span_begin(Dataflow_Trace *t, Dataflow_Handle *h, int stream, int track, int what,
					  int block, int64_t chunk, uint64_t bytes, Dataflow_Trace_Span **span)
{
	if (!span)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "trace span_begin: span is required");
	*span = NULL;
	if (!dataflow_trace_recording(t))
		return DATAFLOW_OK;
	Dataflow_Trace_Span *s = NULL;
	Dataflow_Status st = new_span(t, &s);
	if (st != DATAFLOW_OK)
		return st;
	*s = (Dataflow_Trace_Span){track, what, block, chunk, bytes, t->step, 0, 0};
	st = dataflow_submit_host_op(h, stamp, &s->start, stream);
	if (st != DATAFLOW_OK) {
		t->num_spans--; /* never stamped: not recorded */
		return st;
	}
	*span = s;
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_trace_span_end(Dataflow_Handle *h, int stream, Dataflow_Trace_Span *span)
{
	return span ? dataflow_submit_host_op(h, stamp, &span->end, stream) : DATAFLOW_OK;
}

Dataflow_Status dataflow_trace_sample(Dataflow_Trace *t, Dataflow_Handle *h, uint64_t host_in_use)
{
	if (!dataflow_trace_recording(t))
		return DATAFLOW_OK;
	Dataflow_Memory_Info info;
	Dataflow_Status st = dataflow_memory_info(h, &info);
	if (st != DATAFLOW_OK)
		return st;
	/* one more each time: a few samples per step */
	Dataflow_Trace_Memory *samples = realloc(t->samples, (size_t)(t->num_samples + 1) * sizeof(*samples));
	if (!samples)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "trace: host allocation failed");
	t->samples = samples;
	t->samples[t->num_samples++] =
		(Dataflow_Trace_Memory){now_seconds(), t->step, info.in_use_bytes, info.peak_bytes, host_in_use};
	return DATAFLOW_OK;
}

void dataflow_trace_next_step(Dataflow_Trace *t)
{
	if (dataflow_trace_recording(t))
		t->step++;
}

Dataflow_Status dataflow_trace_read(const Dataflow_Trace *t, Dataflow_Trace_Span *spans, int64_t max_spans,
				    Dataflow_Trace_Memory *samples, int64_t max_samples, int64_t *num_spans,
				    int64_t *num_samples)
{
	if (!t || !num_spans || !num_samples || max_spans < 0 || max_samples < 0 || (max_spans && !spans) ||
	    (max_samples && !samples))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "trace read: trace, num_spans, num_samples and arrays for max_spans (%lld) and "
					  "max_samples (%lld) >= 0 are required",
					  (long long)max_spans, (long long)max_samples);
	for (int64_t i = 0; i < t->num_spans && i < max_spans; i++)
		spans[i] = *span_at(t, i);
	if (t->num_samples && max_samples)
		memcpy(samples, t->samples,
		       (size_t)(t->num_samples < max_samples ? t->num_samples : max_samples) * sizeof(*samples));
	*num_spans = t->num_spans;
	*num_samples = t->num_samples;
	return DATAFLOW_OK;
}
