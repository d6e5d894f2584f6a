/* The resident model's trace: its block calls, gradient sums and optimizer steps as spans of an
 * attached recorder (dataflow/trace.h), on the handle stream each ran on. Without a recorder,
 * or a stopped one, no host op is queued. */
#include "llama_internal.h"

static const char *const work_names[DATAFLOW_LLAMA_NUM_WORK] = {
	[DATAFLOW_LLAMA_WORK_FORWARD] = "forward",
	[DATAFLOW_LLAMA_WORK_BACKWARD] = "backward",
	[DATAFLOW_LLAMA_WORK_ALL_REDUCE] = "grad all-reduce",
	[DATAFLOW_LLAMA_WORK_OPTIMIZER] = "adamw",
};

const char *dataflow_llama_work_name(Dataflow_Llama_Work what)
{
	return (int)what >= 0 && what < DATAFLOW_LLAMA_NUM_WORK ? work_names[what] : NULL;
}

Dataflow_Status llama_span_begin(Dataflow_Llama *m, int stream, Dataflow_Llama_Work what, int block, uint64_t bytes,
				 Dataflow_Trace_Span **span)
{
	return dataflow_trace_span_begin(m->trace, m->handle, stream, stream, (int)what, block, -1, bytes, span);
}

Dataflow_Status llama_span_end(Dataflow_Llama *m, Dataflow_Trace_Span *span)
{
	return span ? dataflow_trace_span_end(m->handle, span->stream, span) : DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_set_trace(Dataflow_Llama *m, Dataflow_Trace *trace)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama set_trace: model is required");
	m->trace = trace;
	return DATAFLOW_OK;
}
