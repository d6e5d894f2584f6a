/* The executor's trace: its units of work as spans of an attached recorder (dataflow/trace.h),
 * each on the stream of its role. Without a recorder, or a stopped one, no host op is queued. */
#include "ring_exec_internal.h"

static const char *const work_names[DATAFLOW_RING_NUM_WORK] = {
	[DATAFLOW_RING_WORK_FORWARD] = "forward",	  [DATAFLOW_RING_WORK_HEAD] = "head",
	[DATAFLOW_RING_WORK_BACKWARD] = "backward",	  [DATAFLOW_RING_WORK_ZERO_GRAD] = "zero grad",
	[DATAFLOW_RING_WORK_BATCH_IN] = "batch in",	  [DATAFLOW_RING_WORK_WEIGHTS_IN] = "weights in",
	[DATAFLOW_RING_WORK_GRAD_IN] = "grad in",	  [DATAFLOW_RING_WORK_ACTS_IN] = "activations in",
	[DATAFLOW_RING_WORK_ACTS_OUT] = "activations out", [DATAFLOW_RING_WORK_GRAD_OUT] = "grad out",
	[DATAFLOW_RING_WORK_LOSSES_OUT] = "losses out",	  [DATAFLOW_RING_WORK_SCALE_GRADS] = "scale grads",
	[DATAFLOW_RING_WORK_GRAD_NORM] = "grad norm",	  [DATAFLOW_RING_WORK_ADAMW] = "adamw",
	[DATAFLOW_RING_WORK_OPT_IN] = "optimizer in",	  [DATAFLOW_RING_WORK_OPT_OUT] = "optimizer out",
	[DATAFLOW_RING_WORK_ALL_REDUCE] = "grad all-reduce", [DATAFLOW_RING_WORK_DISK_READ] = "disk read",
	[DATAFLOW_RING_WORK_DISK_WRITE] = "disk write",
};

const char *dataflow_ring_work_name(Dataflow_Ring_Work what)
{
	return (int)what >= 0 && what < DATAFLOW_RING_NUM_WORK ? work_names[what] : NULL;
}

Dataflow_Status ring_span_begin(Dataflow_Ring_Executor *x, int role, Dataflow_Ring_Work what, int block, int64_t chunk,
				uint64_t bytes, Dataflow_Trace_Span **span)
{
	return dataflow_trace_span_begin(x->trace, x->h, x->s[role], role, (int)what, block, chunk, bytes, span);
}

Dataflow_Status ring_span_end(Dataflow_Ring_Executor *x, Dataflow_Trace_Span *span)
{
	return span ? dataflow_trace_span_end(x->h, x->s[span->stream], span) : DATAFLOW_OK;
}

Dataflow_Status dataflow_ring_executor_set_trace(Dataflow_Ring_Executor *x, Dataflow_Trace *trace)
{
	if (!x)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "ring set_trace: executor is required");
	x->trace = trace;
	return DATAFLOW_OK;
}
