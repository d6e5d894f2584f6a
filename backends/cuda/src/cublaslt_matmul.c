/* CUDA matmul external op over cuBLASLt: D = alpha * op(A) @ op(B) + beta * C (contract in
 * ops.h), row-major. cuBLASLt is column-major, and a row-major X is a column-major X^T, so
 * D^T = op(B)^T op(A)^T is computed: cuBLASLt's A is our B, its B our A, m = N, n = M.
 *
 * cuBLASLt is loaded with dlopen (the nvidia-cublas wheel or a system CUDA). Each registered
 * variant keeps a cuBLASLt handle (made at its first call, so a handle is created, and its
 * other ops work, where cuBLASLt is not installed) and, per shape (M, N, K, transposes), the descriptors and
 * the algorithm the heuristic chose, computed once. fp32 inputs use TF32 tensor cores when
 * DATAFLOW_CUDA_TF32=1 (read at registration), exact fp32 otherwise. The heuristic is told
 * each operand's alignment and the allowed split-K reductions (cublaslt_prefs.h), which are
 * part of the shape's key. Workspace: one
 * WORKSPACE_BYTES block per stream, allocated from the handle's accounted memory on first
 * use. */

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublaslt.h"
#include "cublaslt_prefs.h"
#include "cuda_backend.h"
#include "dataflow/op_args.h"

#define WORKSPACE_BYTES (32ull << 20)
#define MAX_SHAPES 64

static Cublaslt lt;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static Dataflow_Status load_status;
static char load_message[2048];

static void load(void)
{
	static const char *const sonames[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", NULL};
	static const char *const names[] = {
		"cublasLtGetVersion",	       "cublasLtGetStatusName",		 "cublasLtCreate",
		"cublasLtDestroy",	       "cublasLtMatmulDescCreate",	 "cublasLtMatmulDescSetAttribute",
		"cublasLtMatmulDescDestroy",   "cublasLtMatrixLayoutCreate",	 "cublasLtMatrixLayoutDestroy",
		"cublasLtMatmulPreferenceCreate", "cublasLtMatmulPreferenceSetAttribute",
		"cublasLtMatmulPreferenceDestroy", "cublasLtMatmulAlgoGetHeuristic", "cublasLtMatmul"};
	char tried[1536];
	void *lib = cuda_open_library("libcublasLt", sonames, tried, sizeof(tried));
	load_status = DATAFLOW_ERR_LOAD_FAILED;
	if (!lib) {
		snprintf(load_message, sizeof(load_message),
			 "cuda matmul: cannot load cuBLASLt (pip install nvidia-cublas, or set "
			 "DATAFLOW_CUDA_LIBRARY_PATH); tried %s",
			 tried);
		return;
	}
	void **slots = (void **)&lt; /* the table is the functions, in this order */
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!(slots[i] = dlsym(lib, names[i]))) {
			snprintf(load_message, sizeof(load_message), "cuda matmul: cuBLASLt library lacks %s", names[i]);
			return;
		}
	}
	load_status = DATAFLOW_OK;
}

static Dataflow_Status lt_check(cublasStatus_t s, const char *what)
{
	if (s == 0)
		return DATAFLOW_OK;
	return dataflow_set_error(DATAFLOW_ERR_BACKEND, "cuda matmul: %s: %s (%d)", what, lt.cublasLtGetStatusName(s), s);
}

typedef struct {
	int64_t M, N, K;
	int trans_a, trans_b;
	Cublaslt_Prefs prefs;
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t a, b, c; /* cuBLASLt's A (our B), B (our A), C = D */
	cublasLtMatmulAlgo_t algo;
} Shape;

typedef struct {
	Dataflow_Handle *handle;
	cublasLtHandle_t lt;
	int in_type, out_type, compute_type;
	pthread_mutex_t lock; /* guards the shapes and workspaces */
	Shape shapes[MAX_SHAPES];
	int num_shapes, next_evict;
	void *workspace[DATAFLOW_MAX_STREAMS];
} Matmul_State;

static void shape_release(Shape *s)
{
	if (s->desc)
		lt.cublasLtMatmulDescDestroy(s->desc);
	if (s->a)
		lt.cublasLtMatrixLayoutDestroy(s->a);
	if (s->b)
		lt.cublasLtMatrixLayoutDestroy(s->b);
	if (s->c)
		lt.cublasLtMatrixLayoutDestroy(s->c);
	memset(s, 0, sizeof(*s));
}

static void matmul_state_destroy(void *data)
{
	Matmul_State *s = data;
	for (int i = 0; i < s->num_shapes; i++)
		shape_release(&s->shapes[i]);
	/* while the handle is being destroyed this fails, and the ledger releases them instead */
	for (int i = 0; i < DATAFLOW_MAX_STREAMS; i++)
		if (s->workspace[i])
			dataflow_free_mem(s->handle, s->workspace[i]);
	if (s->lt)
		lt.cublasLtDestroy(s->lt);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static int lt_type(DataflowDatatype dt)
{
	return dt == DATAFLOW_FP32 ? CUDA_R_32F : dt == DATAFLOW_FP16 ? CUDA_R_16F : CUDA_R_16BF;
}

Dataflow_Status dataflow_cuda_matmul_init(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
					  Dataflow_Op_State *state)
{
	Matmul_State *s = calloc(1, sizeof(*s));
	if (!s)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "cuda matmul: no memory");
	pthread_mutex_init(&s->lock, NULL);
	s->handle = handle;
	s->in_type = lt_type(skeleton->arg_dtypes[DATAFLOW_MATMUL_ARG_A]);
	s->out_type = lt_type(skeleton->arg_dtypes[DATAFLOW_MATMUL_ARG_D]);
	const char *tf32 = getenv("DATAFLOW_CUDA_TF32");
	s->compute_type = s->in_type == CUDA_R_32F && tf32 && !strcmp(tf32, "1") ? CUBLAS_COMPUTE_32F_FAST_TF32
										 : CUBLAS_COMPUTE_32F;
	state->data = s;
	state->destroy = matmul_state_destroy;
	return DATAFLOW_OK;
}

/* Descriptors and heuristic algorithm for a shape; called with s->lock held. */
static Dataflow_Status build_shape(Matmul_State *s, Shape *sh)
{
	int op_b = sh->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = sh->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
	Dataflow_Status st = lt_check(lt.cublasLtMatmulDescCreate(&sh->desc, s->compute_type, CUDA_R_32F),
				      "cublasLtMatmulDescCreate");
	if (st == DATAFLOW_OK) /* cuBLASLt's A is our B */
		st = lt_check(lt.cublasLtMatmulDescSetAttribute(sh->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof(op_b)),
			      "set TRANSA");
	if (st == DATAFLOW_OK)
		st = lt_check(lt.cublasLtMatmulDescSetAttribute(sh->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof(op_a)),
			      "set TRANSB");
	/* our B: K x N row-major (N x K when trans_b) = column-major N x K (K x N), ld = its row length */
	if (st == DATAFLOW_OK)
		st = lt_check(sh->trans_b ? lt.cublasLtMatrixLayoutCreate(&sh->a, s->in_type, sh->K, sh->N, sh->K)
					  : lt.cublasLtMatrixLayoutCreate(&sh->a, s->in_type, sh->N, sh->K, sh->N),
			      "layout of B");
	if (st == DATAFLOW_OK)
		st = lt_check(sh->trans_a ? lt.cublasLtMatrixLayoutCreate(&sh->b, s->in_type, sh->M, sh->K, sh->M)
					  : lt.cublasLtMatrixLayoutCreate(&sh->b, s->in_type, sh->K, sh->M, sh->K),
			      "layout of A");
	if (st == DATAFLOW_OK)
		st = lt_check(lt.cublasLtMatrixLayoutCreate(&sh->c, s->out_type, sh->N, sh->M, sh->N), "layout of C/D");
	cublasLtMatmulPreference_t pref = NULL;
	if (st == DATAFLOW_OK)
		st = lt_check(lt.cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
	uint64_t ws = WORKSPACE_BYTES;
	if (st == DATAFLOW_OK)
		st = lt_check(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
								      sizeof(ws)),
			      "set workspace preference");
	static const int align_attrs[4] = {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
					   CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
	for (int i = 0; i < 4 && st == DATAFLOW_OK; i++)
		st = lt_check(lt.cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &sh->prefs.align[i],
								      sizeof(sh->prefs.align[i])),
			      "set alignment preference");
	if (st == DATAFLOW_OK)
		st = lt_check(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
								      &sh->prefs.reduction_mask,
								      sizeof(sh->prefs.reduction_mask)),
			      "set reduction-scheme preference");
	cublasLtMatmulHeuristicResult_t result;
	int returned = 0;
	if (st == DATAFLOW_OK)
		st = lt_check(lt.cublasLtMatmulAlgoGetHeuristic(s->lt, sh->desc, sh->a, sh->b, sh->c, sh->c, pref, 1,
								&result, &returned),
			      "cublasLtMatmulAlgoGetHeuristic");
	if (st == DATAFLOW_OK && returned == 0)
		st = dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					"cuda matmul: cuBLASLt has no algorithm for M=%lld N=%lld K=%lld", (long long)sh->M,
					(long long)sh->N, (long long)sh->K);
	if (pref)
		lt.cublasLtMatmulPreferenceDestroy(pref);
	if (st == DATAFLOW_OK)
		sh->algo = result.algo;
	return st;
}

static Dataflow_Status find_shape(Matmul_State *s, int64_t M, int64_t N, int64_t K, int ta, int tb,
				  const Cublaslt_Prefs *prefs, Shape **out)
{
	for (int i = 0; i < s->num_shapes; i++) {
		Shape *sh = &s->shapes[i];
		if (sh->M == M && sh->N == N && sh->K == K && sh->trans_a == ta && sh->trans_b == tb &&
		    !memcmp(&sh->prefs, prefs, sizeof(*prefs))) {
			*out = sh;
			return DATAFLOW_OK;
		}
	}
	/* full: evict round-robin (work already queued keeps its own copy of the algorithm) */
	Shape *sh = s->num_shapes < MAX_SHAPES ? &s->shapes[s->num_shapes++] : &s->shapes[s->next_evict++ % MAX_SHAPES];
	shape_release(sh);
	*sh = (Shape){.M = M, .N = N, .K = K, .trans_a = ta, .trans_b = tb, .prefs = *prefs};
	Dataflow_Status st = build_shape(s, sh);
	if (st != DATAFLOW_OK) {
		shape_release(sh);
		sh->M = -1; /* never matches */
	}
	*out = sh;
	return st;
}

Dataflow_Status dataflow_cuda_matmul(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state)
{
	Matmul_State *s = op_state;
	Dataflow_Matmul_Args m = dataflow_matmul_args(op->op_args);
	const void *A = m.A, *B = m.B, *C = m.C;
	void *D = m.D;
	int64_t M = m.M, N = m.N, K = m.K;
	int ta = m.trans_a != 0, tb = m.trans_b != 0;
	float alpha = m.alpha, beta = m.beta;
	if (!C || beta == 0.0f)
		C = D; /* cuBLASLt reads C only when beta != 0 */
	pthread_once(&load_once, load);
	if (load_status != DATAFLOW_OK)
		return dataflow_set_error(load_status, "%s", load_message);
	pthread_mutex_lock(&s->lock);
	Shape *sh;
	Dataflow_Status st = s->lt ? DATAFLOW_OK : lt_check(lt.cublasLtCreate(&s->lt), "cublasLtCreate");
	const Cublaslt_Prefs prefs = cublaslt_prefs(B, A, C, D, s->out_type); /* cuBLASLt's A is our B */
	if (st == DATAFLOW_OK)
		st = find_shape(s, M, N, K, ta, tb, &prefs, &sh);
	if (st == DATAFLOW_OK && !s->workspace[stream_id])
		st = dataflow_alloc_mem(handle, WORKSPACE_BYTES, &s->workspace[stream_id]);
	if (st == DATAFLOW_OK)
		st = lt_check(lt.cublasLtMatmul(s->lt, sh->desc, &alpha, B, sh->a, A, sh->b, &beta, C, sh->c, D, sh->c,
						 &sh->algo, s->workspace[stream_id], WORKSPACE_BYTES,
						 cuda_of(handle)->streams[stream_id].stream),
			      "cublasLtMatmul");
	pthread_mutex_unlock(&s->lock);
	return st;
}
