#ifndef DATAFLOW_OP_IMPL_H
#define DATAFLOW_OP_IMPL_H

/* For op authors: the functions a native op provides next to its kernel (an init that makes
 * per-op state at registration, a launch function run at every submission) and the launch
 * configuration it fills. Users of ops do not need this header.
 *
 * Launch functions, kernels and external functions see only submissions that passed
 * dataflow_submit_op's checks: for an op registered with a signature (dataflow/op_signature.h)
 * its requirements, extents, NULLs and overlaps. They trust their arguments and check nothing
 * the signature says; what it cannot say is theirs to check. */

#include <stdint.h>

#include "dataflow/handle.h"

/* Filled by an op's launch function. CUDA reads grid/block/shared memory; the host backend
 * runs the kernel once per part, parts spread over its compute threads. */
typedef struct {
	uint32_t grid[3];
	uint32_t block[3];
	uint32_t shared_mem_bytes;
	int num_parts;
} Dataflow_Launch_Config;

typedef Dataflow_Status (*Dataflow_Op_Init_Fn)(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
					       Dataflow_Op_State *state);
/* Chooses the launch configuration of one submission (on the submitting thread). */
typedef Dataflow_Status (*Dataflow_Launch_Fn)(Dataflow_Handle *handle, const Op *op, void *op_state,
					      Dataflow_Launch_Config *config);
/* A host-backend native kernel: one call per part, args as in Op.op_args. */
typedef void (*Dataflow_Host_Kernel)(void **args, int part, int num_parts);

#endif
