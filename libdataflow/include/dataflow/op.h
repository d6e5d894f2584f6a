#ifndef DATAFLOW_OP_H
#define DATAFLOW_OP_H

#include <stdint.h>

#include "dataflow/datatype.h"
#include "dataflow/status.h"

#define DATAFLOW_MAX_OP_ARGS 32
#define DATAFLOW_MAX_OP_NICKNAME 63
#define DATAFLOW_FINGERPRINT_BYTES 32
/* Version of the canonical byte encoding that is hashed into a fingerprint. */
#define DATAFLOW_SKELETON_ENCODING_VERSION 1

/* What an op is: a nickname, an argument count and each argument's datatype.
 * The fingerprint is SHA-256 of the canonical encoding (see fingerprint.c), so the same
 * skeleton has the same fingerprint on every platform and build. */
typedef struct {
	char nickname[DATAFLOW_MAX_OP_NICKNAME + 1];
	int num_args;
	DataflowDatatype arg_dtypes[DATAFLOW_MAX_OP_ARGS];
	uint8_t fingerprint[DATAFLOW_FINGERPRINT_BYTES];
} Op_Skeleton;

/* One invocation: the skeleton plus, as cuLaunchKernel takes them, an array of pointers to
 * the argument values (for a tensor argument, a pointer to the device pointer). */
typedef struct {
	Op_Skeleton skeleton;
	void *op_args[DATAFLOW_MAX_OP_ARGS];
} Op;

/* Fills skeleton and computes its fingerprint. Nickname: 1..63 chars of [A-Za-z0-9_.-]. */
Dataflow_Status dataflow_op_skeleton_init(Op_Skeleton *skeleton, const char *nickname, int num_args,
					  const DataflowDatatype *arg_dtypes);
/* Writes the 64 lowercase hex digits of the fingerprint plus a NUL into hex (65 bytes). */
void dataflow_fingerprint_hex(const uint8_t *fingerprint, char *hex);
/* Human-readable "nickname(dt0, dt1, ...)" into buf (truncated to buf_size). */
void dataflow_op_skeleton_describe(const Op_Skeleton *skeleton, char *buf, int buf_size);

#endif
