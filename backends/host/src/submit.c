#include <stdlib.h>
#include <string.h>

#include "host.h"

/* An op becomes a task: its argument values are copied (the caller may reuse its Op at once),
 * a native op's launch function chooses its parts now, on the submitting thread, so that a
 * launch failure fails this call with nothing queued. */

static void copy_args(Task *t, const Op *op)
{
	t->op.skeleton = op->skeleton;
	for (int i = 0; i < op->skeleton.num_args; i++) {
		DataflowDatatype dt = op->skeleton.arg_dtypes[i];
		size_t size = dataflow_datatype_is_tensor(dt) ? sizeof(void *) : dataflow_datatype_size(dt);
		t->arg_values[i] = 0;
		memcpy(&t->arg_values[i], op->op_args[i], size);
		t->op.op_args[i] = &t->arg_values[i];
	}
}

Dataflow_Status host_submit_op(Dataflow_Handle *h, int stream_id, const Op *op, const Dataflow_Op_Entry *entry)
{
	const Host_Op *rec = entry->record;
	Task *t = task_new(rec ? TASK_KERNEL : TASK_EXTERNAL);
	if (!t)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "submit_op: no memory for a task");
	copy_args(t, op);
	if (rec) {
		Dataflow_Launch_Config config = {.num_parts = 1};
		Dataflow_Status st = rec->launch ? rec->launch(h, &t->op, entry->state.data, &config) : DATAFLOW_OK;
		if (st == DATAFLOW_OK && config.num_parts < 1)
			st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						"op '%s': launch function chose %d parts; expected >= 1", op->skeleton.nickname,
						config.num_parts);
		if (st != DATAFLOW_OK) {
			free(t);
			return st;
		}
		t->u.kernel.kernel = rec->kernel;
		t->u.kernel.num_parts = config.num_parts;
	} else {
		t->u.external.func = entry->external;
		t->u.external.state = entry->state.data;
	}
	stream_enqueue(&host_of(h)->streams[stream_id], t);
	return DATAFLOW_OK;
}

Dataflow_Status host_submit_host_op(Dataflow_Handle *h, int stream_id, Dataflow_Host_Fn func, void *arg)
{
	return host_enqueue_work(h, stream_id, TASK_HOST_FN, (Task_Work){.host_fn = {.func = func, .arg = arg}},
				 "submit_host_op");
}

Dataflow_Status host_enqueue_work(Dataflow_Handle *h, int stream_id, Task_Kind kind, Task_Work work, const char *what)
{
	Task *t = task_new(kind);
	if (!t)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "%s: no memory for a task", what);
	t->u = work;
	stream_enqueue(&host_of(h)->streams[stream_id], t);
	return DATAFLOW_OK;
}
