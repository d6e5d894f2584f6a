#ifndef DATAFLOWOPS_CHECK_H
#define DATAFLOWOPS_CHECK_H

/* Argument checks shared by the dataflow_submit_<op> functions: each failure names the op,
 * the argument, and what was expected vs what was given. */

#include "dataflow/handle.h"

Dataflow_Status ops_check_handle(const char *op, const Dataflow_Handle *handle);
Dataflow_Status ops_check_dtype(const char *op, const char *arg, DataflowDatatype got, const DataflowDatatype *allowed,
				int num_allowed);
Dataflow_Status ops_check_positive(const char *op, const char *arg, int64_t value);
/* value must be finite and in [lo, hi] ([lo, hi) when hi_open); NaN fails. */
Dataflow_Status ops_check_range(const char *op, const char *arg, double value, double lo, double hi, int hi_open);
/* ptr must be non-NULL and hold numel elements of dtype inside one device allocation. */
Dataflow_Status ops_check_tensor(Dataflow_Handle *handle, const char *op, const char *arg, const void *ptr,
				 DataflowDatatype dtype, int64_t numel);
/* numel = a * b, failing on overflow of the byte count. */
Dataflow_Status ops_mul_numel(const char *op, const char *what, int64_t a, int64_t b, int64_t *numel);
/* Builds the Op from a skeleton and pointers to argument values and submits it. */
Dataflow_Status ops_submit(Dataflow_Handle *handle, int stream_id, const Op_Skeleton *skeleton, void *const *args);

#endif
