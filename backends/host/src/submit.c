#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "host.h"

/* submit_op validates everything it can before queueing (stream id, fingerprint, the
 * skeleton's fields, argument pointers, tensor arguments inside device memory, the op's
 * launch function), so a bad op fails at the call that submitted it, nothing queued. */

static Dataflow_Status check_tensor(void *ctx, const void *ptr, const char *what)
{
	return host_check_device_range(ctx, ptr, 1, 1, what);
}

/* Copies argument values into the task so the caller may reuse its Op at once. */
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

Dataflow_Status host_submit_op(Dataflow_Handle *h, const Op *op, int stream_id)
{
	void *found = NULL;
	Dataflow_Status st = dataflow_check_stream_id(h, stream_id, "submit_op");
	if (st == DATAFLOW_OK)
		st = dataflow_op_find_checked(h, op, check_tensor, host_of(h), &found);
	if (st != DATAFLOW_OK)
		return st;
	Host_Op *rec = found;

	Task *t = task_new(rec->kernel ? TASK_KERNEL : TASK_EXTERNAL);
	if (!t)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "submit_op: no memory for a task");
	copy_args(t, op);
	if (rec->kernel) {
		Dataflow_Launch_Config config = {.num_parts = 1};
		if (rec->launch) {
			st = rec->launch(h, &t->op, rec->base.state.data, &config);
			if (st == DATAFLOW_OK && config.num_parts < 1)
				st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
							"op '%s': launch function chose %d parts; expected >= 1",
							op->skeleton.nickname, config.num_parts);
		}
		if (st != DATAFLOW_OK) {
			free(t);
			return st;
		}
		t->u.kernel.kernel = rec->kernel;
		t->u.kernel.num_parts = config.num_parts;
	} else {
		t->u.external.func = rec->base.external;
		t->u.external.state = rec->base.state.data;
	}
	stream_enqueue(&host_of(h)->streams[stream_id], t);
	return DATAFLOW_OK;
}

Dataflow_Status host_submit_host_op(Dataflow_Handle *h, Dataflow_Host_Fn func, void *arg, int stream_id)
{
	Dataflow_Status st = dataflow_check_stream_id(h, stream_id, "submit_host_op");
	if (st != DATAFLOW_OK)
		return st;
	if (!func)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "submit_host_op: function is NULL");
	Task *t = task_new(TASK_HOST_FN);
	if (!t)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "submit_host_op: no memory for a task");
	t->u.host_fn.func = func;
	t->u.host_fn.arg = arg;
	stream_enqueue(&host_of(h)->streams[stream_id], t);
	return DATAFLOW_OK;
}
