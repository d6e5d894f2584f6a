#ifndef DATAFLOWOPS_OP_CATALOGUE_INTERNAL_H
#define DATAFLOWOPS_OP_CATALOGUE_INTERNAL_H

/* What the generated submit functions, the composite ops and the registration share: the
 * table (default_ops.c, generated) and the per-variant skeletons and compiled signatures
 * (op_catalogue.c, built once on first use). */

#include "dataflow/op_signature.h"
#include "dataflow/ops.h"

extern const Dataflow_Op_Info ops_catalogue[];
extern const int ops_catalogue_size;

/* Variant v's skeleton, or NULL (and the error set) if the catalogue's signatures failed
 * to compile. */
const Op_Skeleton *ops_variant_skeleton(const Dataflow_Op_Info *op, int v);

/* Fills *out with the variant of op whose slots have slot_dtypes and the argument pointers
 * args (op->num_args of them), and checks it against the op's signature with the handle's
 * memory (dataflow_check_mem_range). */
Dataflow_Status ops_prepare(Dataflow_Handle *handle, const Dataflow_Op_Info *op, const DataflowDatatype *slot_dtypes,
			    void *const *args, Op *out);
/* ops_prepare, then dataflow_submit_op on stream_id. */
Dataflow_Status ops_submit(Dataflow_Handle *handle, int stream_id, const Dataflow_Op_Info *op,
			   const DataflowDatatype *slot_dtypes, void *const *args);
/* The two halves of a composite op: prepares both (ops_prepare; op indices into ops_catalogue),
 * then submits both or neither: the second must be registered before the first is queued. */
Dataflow_Status ops_submit_composite(Dataflow_Handle *handle, int stream_id, const char *composite, int first,
				     const DataflowDatatype *first_slots, void *const *first_args, int second,
				     const DataflowDatatype *second_slots, void *const *second_args);

#endif
