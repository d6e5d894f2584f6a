/* The trace recorder (dataflow/trace.h) through the public API: spans stamped by the streams
 * that run them, in the order their streams and events impose; labels, steps and memory
 * samples as recorded; nothing queued while stopped; bad arguments. */
#include <stdint.h>

#include "c_test.h"

static void nothing(void *arg)
{
	(void)arg;
}

static Dataflow_Trace_Span read_one(Dataflow_Trace *t, int64_t want_spans, int64_t i)
{
	Dataflow_Trace_Span spans[8];
	int64_t n, m;
	CHECK(dataflow_trace_read(t, spans, 8, NULL, 0, &n, &m));
	EXPECT(n == want_spans && i < n);
	return spans[i];
}

/* A on stream 1 held by a gate, B on stream 0, then C on stream 0 after an event of stream 1:
 * B ends before A (the gate opens after B is done), C starts after A ends. */
static void test_spans_are_stamped_by_their_streams(void)
{
	Dataflow_Handle *h = open_host(2, 1 << 20, NULL);
	Dataflow_Trace *t;
	Dataflow_Trace_Span *a, *b, *c;
	Gate gate = GATE_INIT;
	CHECK(dataflow_trace_create(&t));
	CHECK(dataflow_trace_start(t));
	EXPECT(dataflow_trace_recording(t) == 1);
	CHECK(dataflow_trace_span_begin(t, h, 1, 7, 3, 2, 5, 4096, &a));
	CHECK(dataflow_submit_host_op(h, gate_wait, &gate, 1));
	CHECK(dataflow_trace_span_end(h, 1, a));
	CHECK(dataflow_trace_span_begin(t, h, 0, 8, 4, -1, -1, 0, &b));
	CHECK(dataflow_submit_host_op(h, nothing, NULL, 0));
	CHECK(dataflow_trace_span_end(h, 0, b));
	CHECK(dataflow_sync_stream(h, 0));
	dataflow_trace_next_step(t);
	Dataflow_Stream_State after_a;
	CHECK(dataflow_get_stream_state(h, 1, &after_a));
	CHECK(dataflow_submit_dependency(h, 0, &after_a));
	CHECK(dataflow_trace_span_begin(t, h, 0, 8, 1, 0, 0, 0, &c));
	CHECK(dataflow_trace_span_end(h, 0, c));
	gate_open(&gate);
	CHECK(dataflow_sync_handle(h));

	Dataflow_Trace_Span sa = read_one(t, 3, 0), sb = read_one(t, 3, 1), sc = read_one(t, 3, 2);
	EXPECT(sa.stream == 7 && sa.what == 3 && sa.block == 2 && sa.chunk == 5 && sa.bytes == 4096 && sa.step == 1);
	EXPECT(sb.stream == 8 && sb.what == 4 && sb.block == -1 && sb.chunk == -1 && sb.step == 1);
	EXPECT(sc.what == 1 && sc.step == 2);
	EXPECT(0 < sa.start && sa.start <= sa.end && 0 < sb.start && sb.start <= sb.end && sc.start <= sc.end);
	EXPECT(sb.end <= sa.end);   /* A could not end before the gate opened, after B was done */
	EXPECT(sc.start >= sa.end); /* C waited for A */
	dataflow_trace_destroy(t);
	CHECK(dataflow_handle_destroy(h));
}

/* Samples hold the handle's memory at the time; stopped, nothing is queued or sampled; start
 * discards the recording. */
static void test_samples_stop_and_restart(void)
{
	Dataflow_Handle *h = open_host(1, 1 << 20, NULL);
	Dataflow_Trace *t;
	Dataflow_Trace_Span *span = (Dataflow_Trace_Span *)&span;
	Dataflow_Trace_Memory samples[4];
	int64_t n, m;
	void *p;
	CHECK(dataflow_trace_create(&t));
	CHECK(dataflow_trace_span_begin(t, h, 0, 0, 0, 0, 0, 0, &span)); /* created stopped */
	EXPECT(span == NULL);
	CHECK(dataflow_trace_start(t));
	CHECK(dataflow_alloc_mem(h, 1000, &p));
	CHECK(dataflow_trace_sample(t, h, 123));
	CHECK(dataflow_free_mem(h, p));
	CHECK(dataflow_sync_handle(h));
	CHECK(dataflow_trace_sample(t, h, 0));
	CHECK(dataflow_trace_read(t, NULL, 0, samples, 4, &n, &m));
	EXPECT(n == 0 && m == 2);
	EXPECT(samples[0].device_in_use == 1024 && samples[0].device_peak == 1024 && samples[0].host_in_use == 123);
	EXPECT(samples[1].device_in_use == 0 && samples[1].device_peak == 1024 && samples[0].time <= samples[1].time);
	dataflow_trace_stop(t);
	EXPECT(dataflow_trace_recording(t) == 0);
	CHECK(dataflow_trace_span_begin(t, h, 0, 0, 0, 0, 0, 0, &span));
	EXPECT(span == NULL);
	CHECK(dataflow_trace_span_end(h, 0, span));
	CHECK(dataflow_trace_sample(t, h, 0));
	dataflow_trace_next_step(t);
	CHECK(dataflow_trace_read(t, NULL, 0, NULL, 0, &n, &m));
	EXPECT(n == 0 && m == 2);
	CHECK(dataflow_trace_start(t));
	CHECK(dataflow_trace_read(t, NULL, 0, NULL, 0, &n, &m));
	EXPECT(n == 0 && m == 0);
	dataflow_trace_destroy(t);
	CHECK(dataflow_handle_destroy(h));
}

static void test_bad_arguments(void)
{
	Dataflow_Handle *h = open_host(1, 1 << 20, NULL);
	Dataflow_Trace *t;
	Dataflow_Trace_Span *span;
	int64_t n, m;
	EXPECT_ERROR(dataflow_trace_create(NULL), DATAFLOW_ERR_INVALID_ARGUMENT, "trace create: trace is required");
	CHECK(dataflow_trace_create(&t));
	EXPECT_ERROR(dataflow_trace_start(NULL), DATAFLOW_ERR_INVALID_ARGUMENT, "trace start: trace is required");
	CHECK(dataflow_trace_start(t));
	EXPECT_ERROR(dataflow_trace_span_begin(t, h, 0, 0, 0, 0, 0, 0, NULL), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "span is required");
	EXPECT_ERROR(dataflow_trace_span_begin(t, h, 5, 0, 0, 0, 0, 0, &span), DATAFLOW_ERR_INVALID_ARGUMENT, "stream");
	EXPECT(span == NULL);
	EXPECT_ERROR(dataflow_trace_read(t, NULL, 5, NULL, 0, &n, &m), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "arrays for max_spans (5) and max_samples (0) >= 0 are required");
	EXPECT_ERROR(dataflow_trace_read(NULL, NULL, 0, NULL, 0, &n, &m), DATAFLOW_ERR_INVALID_ARGUMENT, "trace read");
	CHECK(dataflow_trace_read(t, NULL, 0, NULL, 0, &n, &m));
	EXPECT(n == 0 && m == 0); /* the failed span is not recorded */
	dataflow_trace_stop(NULL);
	dataflow_trace_destroy(NULL);
	dataflow_trace_destroy(t);
	CHECK(dataflow_handle_destroy(h));
}

int main(void)
{
	test_spans_are_stamped_by_their_streams();
	test_samples_stop_and_restart();
	test_bad_arguments();
	printf("ok\n");
	return 0;
}
