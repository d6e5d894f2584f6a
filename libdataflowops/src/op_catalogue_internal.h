#ifndef DATAFLOWOPS_OP_CATALOGUE_INTERNAL_H
#define DATAFLOWOPS_OP_CATALOGUE_INTERNAL_H

/* What the generated submit functions, the composite ops and the registration share: the
 * table (default_ops.c, generated) and the per-variant skeletons (op_catalogue.c, built once
 * on first use). */

#include "dataflow/ops.h"

extern const Dataflow_Op_Info ops_catalogue[];
extern const int ops_catalogue_size;

/* Variant v's skeleton, or NULL (and the error set) if the catalogue's skeletons could not
 * be built. */
const Op_Skeleton *ops_variant_skeleton(const Dataflow_Op_Info *op, int v);

/* Submits the variant of op whose slots have slot_dtypes with the argument pointers args
 * (op->num_args of them); checking them is dataflow_submit_op's (the op's signature). */
Dataflow_Status ops_submit(Dataflow_Handle *handle, int stream_id, const Dataflow_Op_Info *op,
			   const DataflowDatatype *slot_dtypes, void *const *args);
/* The two halves of a composite op (op indices into ops_catalogue): checks both
 * (dataflow_op_check), then submits both, so that a failure queues neither. */
Dataflow_Status ops_submit_composite(Dataflow_Handle *handle, int stream_id, int first,
				     const DataflowDatatype *first_slots, void *const *first_args, int second,
				     const DataflowDatatype *second_slots, void *const *second_args);

#endif
