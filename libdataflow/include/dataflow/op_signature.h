#ifndef DATAFLOW_OP_SIGNATURE_H
#define DATAFLOW_OP_SIGNATURE_H

/* What an op's arguments must satisfy, beyond their datatypes: which tensors are read and
 * written, how many elements each must hold (in terms of the scalar arguments), which may be
 * NULL or alias each other, and requirements on the scalars. An op may be registered with a
 * signature (a string, compiled once at registration); the dispatch layer then checks every
 * submission of the op against it before the backend sees it, so kernels can trust their
 * arguments. Nothing here knows any particular op.
 *
 * The grammar is documented with dataflow_op_signature_compile (op_signature.c). */

#include <stdint.h>

#include "dataflow/op.h"
#include "dataflow/status.h"

typedef struct Dataflow_Op_Signature Dataflow_Op_Signature;

/* OK if [ptr, ptr + size_bytes) is memory the op may use; otherwise sets the error (naming
 * `what`) and returns its status. */
typedef Dataflow_Status (*Dataflow_Range_Check_Fn)(void *ctx, const void *ptr, uint64_t size_bytes,
						   const char *what);

/* Compiles text for the op described by skeleton. A parse error, a clause count that differs
 * from the skeleton's argument count, or a clause whose kind (scalar or tensor) disagrees
 * with the argument's datatype fails with DATAFLOW_ERR_INVALID_ARGUMENT and a message naming
 * the op and the offending text. */
Dataflow_Status dataflow_op_signature_compile(const char *text, const Op_Skeleton *skeleton,
					      Dataflow_Op_Signature **signature);
void dataflow_op_signature_destroy(Dataflow_Op_Signature *signature);

/* Checks op (whose skeleton is the compiled one's) against the signature: requirements,
 * every tensor non-NULL unless nullable and accepted by check_range for its extent, and no
 * overlap between an output and another tensor argument other than a declared exact alias. */
Dataflow_Status dataflow_op_signature_check(const Dataflow_Op_Signature *signature, const Op *op,
					    Dataflow_Range_Check_Fn check_range, void *ctx);

#endif
