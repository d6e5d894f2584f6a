#include <stdio.h>
#include <string.h>

#include "dataflow/op_impl.h"
#include "op_table.h"

/* The checks every submission of an op passes, whatever the op. They run for every op, so
 * they read the datatypes of a skeleton already found equal to a registered (valid) one
 * directly, and format names only for a failure. */

static inline int is_tensor(DataflowDatatype dt)
{
	return dt < DATAFLOW_FP32_SCALAR;
}

Dataflow_Status dataflow_op_check(const Op *op, const Op_Skeleton *registered,
				  Dataflow_Status (*check_tensor)(void *ctx, const void *ptr, const char *what),
				  void *ctx)
{
	const Op_Skeleton *s = &op->skeleton;
	if (s->num_args != registered->num_args ||
	    memcmp(s->arg_dtypes, registered->arg_dtypes, (size_t)registered->num_args * sizeof(DataflowDatatype)) != 0) {
		char want[512];
		dataflow_op_skeleton_describe(registered, want, sizeof(want));
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "submit_op: op has the fingerprint of %s but its skeleton says %d args; "
					  "rebuild the skeleton with dataflow_op_skeleton_init",
					  want, s->num_args);
	}
	for (int i = 0; i < s->num_args; i++) {
		if (!op->op_args[i])
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "op '%s' argument %d (%s): op_args[%d] is NULL; expected a pointer to "
						  "the argument value",
						  s->nickname, i, dataflow_datatype_name(s->arg_dtypes[i]), i);
		if (!is_tensor(s->arg_dtypes[i]))
			continue;
		/* A NULL tensor passes (optional inputs): the op decides whether it needs one. */
		const void *ptr = *(void *const *)op->op_args[i];
		/* the message is only formatted for a bad pointer: this runs for every op */
		if (ptr && check_tensor(ctx, ptr, "op argument") != DATAFLOW_OK) {
			char what[128];
			snprintf(what, sizeof(what), "op '%s' argument %d (%s tensor)", s->nickname, i,
				 dataflow_datatype_name(s->arg_dtypes[i]));
			return check_tensor(ctx, ptr, what);
		}
	}
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_op_require_tensors(const Op *op, uint32_t nullable)
{
	const Op_Skeleton *s = &op->skeleton;
	for (int i = 0; i < s->num_args; i++)
		if (is_tensor(s->arg_dtypes[i]) && !(nullable >> i & 1) && !*(void *const *)op->op_args[i])
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "op '%s' argument %d (%s tensor): pointer is NULL; this op needs it",
						  s->nickname, i, dataflow_datatype_name(s->arg_dtypes[i]));
	return DATAFLOW_OK;
}
