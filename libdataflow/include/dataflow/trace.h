#ifndef DATAFLOW_TRACE_H
#define DATAFLOW_TRACE_H

/* A trace recorder: spans of work timed by the streams that ran them, and memory samples.
 * Whoever submits the work (the ring executor, dataflow_ring_executor_set_trace) brackets each
 * unit of work on its stream with two host ops (dataflow_submit_host_op) that stamp the
 * CLOCK_MONOTONIC time (seconds) when the stream reaches them: start once the unit's dependencies are met, end once it is done. Spans
 * are measured by the streams themselves, so work on different streams that ran at once
 * overlaps in the trace (on CUDA a stamp includes a host function's callback latency,
 * microseconds). While the recorder is stopped (or none is attached) nothing is submitted, so
 * tracing changes no result. A span costs ~64 bytes of host memory. Python: dataflow.trace. */
#include <stdint.h>

#include "dataflow/handle.h"
#include "dataflow/status.h"

typedef struct Dataflow_Trace Dataflow_Trace;

typedef struct {
	int stream;          /* the recorder's user's track: the ring's stream role, the model's handle stream */
	int what;            /* the user's kind of work: Dataflow_Ring_Work, Dataflow_Llama_Work */
	int block;           /* the model's block (0 embedding, 1..L layers, L + 1 head); -1: none */
	int64_t chunk;       /* the chunk of the call; -1: none */
	uint64_t bytes;      /* transfers: bytes moved, else 0 */
	int64_t step;        /* 1 + the optimizer steps before it since dataflow_trace_start */
	double start, end;   /* seconds, CLOCK_MONOTONIC; 0 until the stream stamps it */
} Dataflow_Trace_Span;

typedef struct {
	double time;         /* seconds, CLOCK_MONOTONIC */
	int64_t step;
	uint64_t device_in_use, device_peak; /* the handle's (dataflow_memory_info) */
	uint64_t host_in_use;                /* the recorder's user's host arrays */
} Dataflow_Trace_Memory;

/* A stopped, empty recorder; destroy frees it (NULL: no-op). Destroy, start and read only once
 * the work that stamps its spans is done (spans are stamped in place). */
Dataflow_Status dataflow_trace_create(Dataflow_Trace **trace);
void dataflow_trace_destroy(Dataflow_Trace *trace);
/* Discards any recording and records from now on, from step 1. */
Dataflow_Status dataflow_trace_start(Dataflow_Trace *trace);
/* Stops recording (the recording stays readable; spans already queued still get stamped). NULL: no-op. */
void dataflow_trace_stop(Dataflow_Trace *trace);
/* 1 while recording; 0 when stopped or NULL. */
int dataflow_trace_recording(const Dataflow_Trace *trace);

/* For the recorder's users. A span of work on `stream` of h opens (its start stamp queued
 * there; labelled track, what, block, chunk, bytes) and closes (its end stamp, queued on the
 * stream it opened on). While not recording, *span is NULL and nothing is queued; end of NULL
 * does nothing. */
Dataflow_Status dataflow_trace_span_begin(Dataflow_Trace *trace, Dataflow_Handle *h, int stream, int track, int what,
					  int block, int64_t chunk, uint64_t bytes, Dataflow_Trace_Span **span);
Dataflow_Status dataflow_trace_span_end(Dataflow_Handle *h, int stream, Dataflow_Trace_Span *span);
/* While recording: a memory sample now (h's device memory, the caller's host bytes). */
Dataflow_Status dataflow_trace_sample(Dataflow_Trace *trace, Dataflow_Handle *h, uint64_t host_in_use);
/* While recording: later spans and samples belong to the next step (after an optimizer step). */
void dataflow_trace_next_step(Dataflow_Trace *trace);

/* Copies the first max_spans spans (in submission order) and max_samples memory samples, and
 * sets *num_spans / *num_samples to how many were recorded (call with 0 and NULL to size the
 * arrays). Read after the work is done: a span whose work is still queued has no end yet. */
Dataflow_Status dataflow_trace_read(const Dataflow_Trace *trace, Dataflow_Trace_Span *spans, int64_t max_spans,
				    Dataflow_Trace_Memory *samples, int64_t max_samples, int64_t *num_spans,
				    int64_t *num_samples);

#endif
