#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "host.h"

/* submit_op validates everything it can before queueing (stream id, fingerprint, the
 * skeleton's fields, argument pointers, tensor arguments inside device memory, the op's
 * launch function), so a bad op fails at the call that submitted it, nothing queued. */

static Dataflow_Status check_args(Host_Handle *h, const Op *op)
{
	const Op_Skeleton *s = &op->skeleton;
	for (int i = 0; i < s->num_args; i++) {
		const char *dt = dataflow_datatype_name(s->arg_dtypes[i]);
		if (!op->op_args[i])
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "op '%s' argument %d (%s): op_args[%d] is NULL; expected a pointer to "
						  "the argument value",
						  s->nickname, i, dt, i);
		if (!dataflow_datatype_is_tensor(s->arg_dtypes[i]))
			continue;
		/* A NULL tensor is allowed (optional inputs); the op decides whether it needs it. */
		const void *ptr = *(void *const *)op->op_args[i];
		/* the message is only formatted for a bad pointer: this runs for every op */
		if (ptr && host_check_device_range(h, ptr, 1, 1, "op argument") != DATAFLOW_OK) {
			char what[128];
			snprintf(what, sizeof(what), "op '%s' argument %d (%s tensor)", s->nickname, i, dt);
			return host_check_device_range(h, ptr, 1, 1, what);
		}
	}
	return DATAFLOW_OK;
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
	Dataflow_Status st = host_check_stream(h, stream_id, "submit_op");
	if (st != DATAFLOW_OK)
		return st;
	if (!op)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "submit_op: op is NULL");
	Host_Op *rec = dataflow_op_table_lookup(h->op_table, op->skeleton.fingerprint);
	if (!rec)
		return dataflow_op_table_unknown_error(h->op_table, &op->skeleton);
	if (op->skeleton.num_args != rec->skeleton.num_args ||
	    memcmp(op->skeleton.arg_dtypes, rec->skeleton.arg_dtypes,
		   (size_t)rec->skeleton.num_args * sizeof(DataflowDatatype)) != 0) {
		char want[512];
		dataflow_op_skeleton_describe(&rec->skeleton, want, sizeof(want));
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "submit_op: op has the fingerprint of %s but its skeleton says %d args; "
					  "rebuild the skeleton with dataflow_op_skeleton_init",
					  want, op->skeleton.num_args);
	}
	st = check_args(host_of(h), op);
	if (st != DATAFLOW_OK)
		return st;

	Task *t = task_new(rec->kernel ? TASK_KERNEL : TASK_EXTERNAL);
	if (!t)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "submit_op: no memory for a task");
	copy_args(t, op);
	if (rec->kernel) {
		Dataflow_Launch_Config config = {.num_parts = 1};
		if (rec->launch) {
			st = rec->launch(h, &t->op, rec->state.data, &config);
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
		t->u.external.func = rec->external;
		t->u.external.state = rec->state.data;
	}
	stream_enqueue(&host_of(h)->streams[stream_id], t);
	return DATAFLOW_OK;
}

Dataflow_Status host_submit_host_op(Dataflow_Handle *h, Dataflow_Host_Fn func, void *arg, int stream_id)
{
	Dataflow_Status st = host_check_stream(h, stream_id, "submit_host_op");
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
