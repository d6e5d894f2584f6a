#include <stdio.h>
#include <string.h>

#include "check.h"

Dataflow_Status ops_check_handle(const char *op, const Dataflow_Handle *handle)
{
	if (!handle)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: handle is NULL", op);
	return DATAFLOW_OK;
}

Dataflow_Status ops_check_dtype(const char *op, const char *arg, DataflowDatatype got, const DataflowDatatype *allowed,
				int num_allowed)
{
	char list[256];
	size_t pos = 0;
	for (int i = 0; i < num_allowed; i++) {
		if (allowed[i] == got)
			return DATAFLOW_OK;
		int n = snprintf(list + pos, sizeof(list) - pos, "%s%s", i ? ", " : "",
				 dataflow_datatype_name(allowed[i]));
		pos += (n > 0 && (size_t)n < sizeof(list) - pos) ? (size_t)n : 0;
	}
	const char *name = dataflow_datatype_name(got);
	return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: %s dtype must be one of {%s}, got %s (%d)", op, arg,
				  list, name ? name : "invalid", (int)got);
}

Dataflow_Status ops_check_positive(const char *op, const char *arg, int64_t value)
{
	if (value <= 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: %s must be > 0, got %lld", op, arg,
					  (long long)value);
	return DATAFLOW_OK;
}

Dataflow_Status ops_check_range(const char *op, const char *arg, double value, double lo, double hi, int hi_open)
{
	int ok = value >= lo && (hi_open ? value < hi : value <= hi) && value - value == 0;
	if (!ok)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: %s must be a finite number in [%g, %g%c, got %g",
					  op, arg, lo, hi, hi_open ? ')' : ']', value);
	return DATAFLOW_OK;
}

Dataflow_Status ops_mul_numel(const char *op, const char *what, int64_t a, int64_t b, int64_t *numel)
{
	if (a < 0 || b < 0 || (a > 0 && b > INT64_MAX / 16 / a))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: %s = %lld x %lld overflows or is negative",
					  op, what, (long long)a, (long long)b);
	*numel = a * b;
	return DATAFLOW_OK;
}

Dataflow_Status ops_check_tensor(Dataflow_Handle *handle, const char *op, const char *arg, const void *ptr,
				 DataflowDatatype dtype, int64_t numel)
{
	if (!ptr)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, arg);
	size_t size = dataflow_datatype_size(dtype);
	if (numel < 0 || (uint64_t)numel > UINT64_MAX / 16)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: %s has an invalid element count %lld", op,
					  arg, (long long)numel);
	if (numel == 0)
		return DATAFLOW_OK;
	char what[160];
	snprintf(what, sizeof(what), "%s: %s (%lld %s elements)", op, arg, (long long)numel,
		 dataflow_datatype_name(dtype));
	return dataflow_check_mem_range(handle, ptr, (uint64_t)numel * size, what);
}

Dataflow_Status ops_submit(Dataflow_Handle *handle, int stream_id, const Op_Skeleton *skeleton, void *const *args)
{
	Op op;
	op.skeleton = *skeleton;
	memcpy(op.op_args, args, (size_t)skeleton->num_args * sizeof(void *));
	return dataflow_submit_op(handle, &op, stream_id);
}
