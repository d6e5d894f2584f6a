#ifndef DATAFLOW_HOST_MATMUL_H
#define DATAFLOW_HOST_MATMUL_H

/* Private interface between the host matmul external op (matmul.c) and its two engines:
 * oneDNN (matmul_onednn.c) and the portable fallback (matmul_fallback.c). */

#include <stdint.h>

#include "dataflow/datatype.h"
#include "dataflow/op_impl.h"
#include "dataflow/status.h"

/* Shared between the three files of this library, not part of its exported interface. */
#define MATMUL_PRIVATE __attribute__((visibility("hidden")))

/* One call, unpacked from Op.op_args: D = alpha * op(A) @ op(B) + beta * C (see ops.h). */
typedef struct {
	DataflowDatatype in_dtype;  /* A, B */
	DataflowDatatype out_dtype; /* C, D */
	const void *A, *B, *C;      /* C is NULL or ignored when beta == 0; may equal D */
	void *D;
	int64_t M, N, K;
	int trans_a, trans_b;
	float alpha, beta;
	int num_threads; /* the handle's compute threads */
	/* 1: oneDNN builds one primitive for every M and K (runtime dimensions), for callers whose
	 * M or K changes from call to call (the grouped expert matmuls: each expert's row count
	 * follows the routing); the per-shape cache would otherwise grow with every new count. */
	int runtime_mk;
} Matmul_Args;

/* The matmul external op's init (matmul.c): its state holds the engines DATAFLOW_HOST_MATMUL
 * asks for. */
Dataflow_Status dataflow_host_matmul_init(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
					  Dataflow_Op_State *state);
/* One call on the engines of such a state: oneDNN where it is built in and implements the
 * dtypes, else the fallback. Other host ops that run matmuls (moe_grouped_matmul) share it. */
MATMUL_PRIVATE Dataflow_Status matmul_run(void *state, int stream_id, const Matmul_Args *args);

typedef struct Matmul_Fallback Matmul_Fallback;
MATMUL_PRIVATE Dataflow_Status matmul_fallback_create(Matmul_Fallback **fallback);
MATMUL_PRIVATE void matmul_fallback_destroy(Matmul_Fallback *fallback);
/* Thread-safe: concurrent calls run one after another (they would share the same cores). */
MATMUL_PRIVATE Dataflow_Status matmul_fallback_run(Matmul_Fallback *fallback, const Matmul_Args *args);

#ifdef DATAFLOW_HAVE_ONEDNN
typedef struct Matmul_Onednn Matmul_Onednn;
MATMUL_PRIVATE Dataflow_Status matmul_onednn_create(Matmul_Onednn **onednn);
MATMUL_PRIVATE void matmul_onednn_destroy(Matmul_Onednn *onednn);
/* Thread-safe across stream ids; calls for one stream id must not overlap (stream order).
 * Returns DATAFLOW_ERR_UNSUPPORTED, without setting an error, when oneDNN has no
 * implementation for this dtype combination: the caller runs the fallback instead. */
MATMUL_PRIVATE Dataflow_Status matmul_onednn_run(Matmul_Onednn *onednn, int stream_id, const Matmul_Args *args);
#endif

#endif
