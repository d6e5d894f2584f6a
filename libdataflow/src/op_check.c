#include <stdio.h>
#include <string.h>

#include "handle_internal.h"

/* The checks every submission of an op passes, whatever the op. They run for every op, so
 * they read the datatypes of a skeleton already found equal to a registered (valid) one
 * directly, and format names only for a failure. */

static inline int is_tensor(DataflowDatatype dt)
{
	return dt < DATAFLOW_FP32_SCALAR;
}

/* Without a signature: every non-NULL tensor must lie (for one byte) in memory check_range
 * accepts; a NULL one passes (the op may take optional inputs). */
static Dataflow_Status check_tensors(const Op *op, Dataflow_Range_Check_Fn check_range, void *ctx)
{
	const Op_Skeleton *s = &op->skeleton;
	for (int i = 0; i < s->num_args; i++) {
		if (!is_tensor(s->arg_dtypes[i]))
			continue;
		const void *ptr = *(void *const *)op->op_args[i];
		/* the message is only formatted for a bad pointer: this runs for every op */
		if (ptr && check_range(ctx, ptr, 1, "op argument") != DATAFLOW_OK) {
			char what[128];
			snprintf(what, sizeof(what), "op '%s' argument %d (%s tensor)", s->nickname, i,
				 dataflow_datatype_name(s->arg_dtypes[i]));
			return check_range(ctx, ptr, 1, what);
		}
	}
	return DATAFLOW_OK;
}

Dataflow_Status op_entry_check(const Op *op, const Dataflow_Op_Entry *e, Dataflow_Range_Check_Fn check_range,
			       void *ctx)
{
	const Op_Skeleton *s = &op->skeleton, *registered = &e->skeleton;
	if (s->num_args != registered->num_args ||
	    memcmp(s->arg_dtypes, registered->arg_dtypes, (size_t)registered->num_args * sizeof(DataflowDatatype)) != 0) {
		char want[512];
		dataflow_op_skeleton_describe(registered, want, sizeof(want));
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "submit_op: op has the fingerprint of %s but its skeleton says %d args; "
					  "rebuild the skeleton with dataflow_op_skeleton_init",
					  want, s->num_args);
	}
	for (int i = 0; i < s->num_args; i++)
		if (!op->op_args[i])
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "op '%s' argument %d (%s): op_args[%d] is NULL; expected a pointer to "
						  "the argument value",
						  s->nickname, i, dataflow_datatype_name(s->arg_dtypes[i]), i);
	return e->signature ? dataflow_op_signature_check(e->signature, op, check_range, ctx)
			    : check_tensors(op, check_range, ctx);
}
