/* Host matmul external op: D = alpha * op(A) @ op(B) + beta * C (contract in ops.h).
 *
 * Runs on oneDNN when the library was built with it (matmul_onednn.c), on the portable
 * fallback otherwise (matmul_fallback.c), and on the fallback for any dtype combination
 * oneDNN has no implementation for (fp16 on CPUs without AVX512-FP16).
 *
 * DATAFLOW_HOST_MATMUL, read when the op is registered (handle creation):
 *   unset or "auto"  oneDNN if built in, else the fallback
 *   "onednn"         oneDNN; registration fails if it is not built in
 *   "fallback"       the fallback only (its vector path follows DATAFLOW_SIMD, see simd.h)
 * Threads: the handle's compute threads (its "threads" option), for both engines. */

#include <stdlib.h>
#include <string.h>

#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "matmul.h"

typedef struct {
	Matmul_Fallback *fallback;
#ifdef DATAFLOW_HAVE_ONEDNN
	Matmul_Onednn *onednn; /* NULL when DATAFLOW_HOST_MATMUL=fallback */
#endif
} Matmul_State;

static void matmul_state_destroy(void *data)
{
	Matmul_State *s = data;
	if (!s)
		return;
#ifdef DATAFLOW_HAVE_ONEDNN
	matmul_onednn_destroy(s->onednn);
#endif
	matmul_fallback_destroy(s->fallback);
	free(s);
}

Dataflow_Status dataflow_host_matmul_init(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
					  Dataflow_Op_State *state)
{
	(void)handle;
	(void)skeleton;
	const char *mode = getenv("DATAFLOW_HOST_MATMUL");
	if (!mode || !*mode)
		mode = "auto";
	int use_onednn = strcmp(mode, "onednn") == 0 || strcmp(mode, "auto") == 0;
	if (!use_onednn && strcmp(mode, "fallback") != 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "host matmul: DATAFLOW_HOST_MATMUL='%s', expected auto, onednn or fallback", mode);
#ifndef DATAFLOW_HAVE_ONEDNN
	if (strcmp(mode, "onednn") == 0)
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "host matmul: DATAFLOW_HOST_MATMUL=onednn, but this build has no oneDNN");
#endif

	Matmul_State *s = calloc(1, sizeof(*s));
	if (!s)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "host matmul: out of host memory");
	Dataflow_Status st = matmul_fallback_create(&s->fallback);
#ifdef DATAFLOW_HAVE_ONEDNN
	if (st == DATAFLOW_OK && use_onednn)
		st = matmul_onednn_create(&s->onednn);
#endif
	if (st != DATAFLOW_OK) {
		matmul_state_destroy(s);
		return st;
	}
	state->data = s;
	state->destroy = matmul_state_destroy;
	return DATAFLOW_OK;
}

Dataflow_Status matmul_run(void *state, int stream_id, const Matmul_Args *args)
{
	Matmul_State *s = state;
#ifdef DATAFLOW_HAVE_ONEDNN
	if (s->onednn) {
		Dataflow_Status st = matmul_onednn_run(s->onednn, stream_id, args);
		if (st != DATAFLOW_ERR_UNSUPPORTED)
			return st;
	}
#else
	(void)stream_id;
#endif
	return matmul_fallback_run(s->fallback, args);
}

Dataflow_Status dataflow_host_matmul(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state)
{
	Dataflow_Matmul_Args m = dataflow_matmul_args(op->op_args);
	Matmul_Args args = {
		.in_dtype = op->skeleton.arg_dtypes[DATAFLOW_MATMUL_ARG_A],
		.out_dtype = op->skeleton.arg_dtypes[DATAFLOW_MATMUL_ARG_D],
		.A = m.A,
		.B = m.B,
		.C = m.C,
		.D = m.D,
		.M = m.M,
		.N = m.N,
		.K = m.K,
		.trans_a = m.trans_a,
		.trans_b = m.trans_b,
		.alpha = m.alpha,
		.beta = m.beta,
		.num_threads = dataflow_host_compute_threads(handle),
	};
	return matmul_run(op_state, stream_id, &args);
}
