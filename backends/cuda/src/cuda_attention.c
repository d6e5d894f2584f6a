/* attention, attention_kv, attention_bwd and attention_kv_bwd on CUDA: external ops that choose, per call, one
 * of three implementations (cuda_attention_choose, a pure function of the shape and device):
 *   cuDNN's fused SDPA (cudnn_sdpa.c; the library loaded with dlopen at first need, a plan
 *     per shape cached here), where cuDNN is present and takes the shape;
 *   the tensor-core kernels of kernels/attention.cu and attention_bwd.cu (sm_80+, fp16/bf16);
 *   the SIMT kernels (fp32, older GPUs).
 * DATAFLOW_CUDA_ATTENTION=cudnn|native|simt overrides the automatic choice (read at
 * registration); dataflow_cuda_attention_last_choice() says what the calling thread's last
 * submission ran.
 *
 * The cuDNN path computes tokens [0, T) as one sequence into scratch buffers; a one-thread
 * kernel compares that with the op's cu_seqlens on the device, then the scratch is copied
 * into place and the native kernels skip, or the copy skips and the native kernels run: no
 * host synchronisation, and the op's contract (rows outside every sequence untouched) holds
 * for any cu_seqlens. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_params.cuh"
#include "cuda_kernel_call.h"
#include "cuda_launch_config.h"
#include "cudnn_sdpa.h"
#include "dataflow/attention_args.h"
#include "dataflow/cuda.h"
#include "dataflow/op_args.h"

#define LOG2E 1.44269504088896340736f
#define MAX_PLANS 16

typedef enum { OP_ATTENTION, OP_ATTENTION_KV, OP_ATTENTION_BWD, OP_ATTENTION_KV_BWD } Attn_Op;

/* ---- cuDNN, loaded once per process ---- */

static Cudnn_Api cudnn;
static int cudnn_version; /* 0: not loaded */
static pthread_once_t cudnn_once = PTHREAD_ONCE_INIT;

static void cudnn_load(void)
{
	static const char *const sonames[] = {"libcudnn.so.9", "libcudnn.so", NULL};
	static const char *const names[] = {"cudnnGetVersion",
					    "cudnnGetErrorString",
					    "cudnnGetLastErrorString",
					    "cudnnCreate",
					    "cudnnDestroy",
					    "cudnnSetStream",
					    "cudnnBackendCreateDescriptor",
					    "cudnnBackendDestroyDescriptor",
					    "cudnnBackendFinalize",
					    "cudnnBackendSetAttribute",
					    "cudnnBackendGetAttribute",
					    "cudnnBackendExecute"};
	char tried[1536];
	void *lib = cuda_open_library("libcudnn", sonames, tried, sizeof(tried));
	if (!lib)
		return;
	void **slots = (void **)&cudnn; /* the table is the functions, in this order */
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!(slots[i] = dlsym(lib, names[i])))
			return; /* too old for this path: leave cudnn_version 0 */
	cudnn_version = (int)cudnn.cudnnGetVersion();
}

/* ---- the op's state ---- */

typedef struct {
	Cudnn_Sdpa_Shape shape;
	Cudnn_Sdpa_Plan plan;
	Dataflow_Status status; /* DATAFLOW_OK: plan usable; else cuDNN refused the shape */
} Plan_Entry;

enum { KFWD, KDKDV, KDQ, KINDS };

typedef struct {
	Dataflow_Handle *handle;
	Attn_Op op;
	DataflowDatatype dtype;
	int cc, max_smem, force;
	char names[KINDS][4][32]; /* [kind][bucket 64/128/256, then SIMT] */
	Cuda_Kernel kernels[KINDS][4];
	Cuda_Kernel check, commit;
	pthread_mutex_t lock; /* guards what follows */
	cudnnHandle_t cudnn;
	Plan_Entry plans[MAX_PLANS];
	int num_plans, next_evict;
	void *ws[DATAFLOW_MAX_STREAMS];
	uint64_t ws_bytes[DATAFLOW_MAX_STREAMS];
} Attn_State;

static _Thread_local char last_choice[160];

const char *dataflow_cuda_attention_last_choice(void)
{
	return last_choice;
}

static void state_destroy(void *data)
{
	Attn_State *s = data;
	for (int i = 0; i < s->num_plans; i++)
		if (s->plans[i].status == DATAFLOW_OK)
			cudnn_sdpa_release(&cudnn, &s->plans[i].plan);
	if (s->cudnn)
		cudnn.cudnnDestroy(s->cudnn);
	for (int i = 0; i < DATAFLOW_MAX_STREAMS; i++)
		if (s->ws[i])
			dataflow_free_mem(s->handle, s->ws[i]);
	for (int k = 0; k < KINDS; k++)
		for (int b = 0; b < 4; b++)
			cuda_kernel_destroy(&s->kernels[k][b]);
	cuda_kernel_destroy(&s->check);
	cuda_kernel_destroy(&s->commit);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static const char *dtype_name(DataflowDatatype dt)
{
	return dt == DATAFLOW_FP32 ? "fp32" : dt == DATAFLOW_FP16 ? "fp16" : "bf16";
}

static Dataflow_Status init(Dataflow_Handle *handle, const Op_Skeleton *skeleton, Dataflow_Op_State *state, Attn_Op op,
			    int dtype_arg)
{
	Attn_State *s = calloc(1, sizeof(*s));
	if (!s)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "attention: no memory");
	Cuda_Handle *h = cuda_of(handle);
	s->handle = handle;
	s->op = op;
	s->dtype = skeleton->arg_dtypes[dtype_arg];
	s->cc = h->cc_major * 10 + h->cc_minor;
	s->force = cuda_attention_force(getenv("DATAFLOW_CUDA_ATTENTION"));
	int sm_count;
	Dataflow_Status st = cuda_device_limits(h, &sm_count, &s->max_smem);
	if (st != DATAFLOW_OK) {
		free(s);
		return st;
	}
	static const char *const kind[KINDS] = {"fwd", "dkdv", "dq"};
	static const char *const file[KINDS] = {"attention.cu", "attention_bwd.cu", "attention_bwd.cu"};
	static const int buckets[3] = {64, 128, 256};
	const char *dt = dtype_name(s->dtype);
	for (int k = 0; k < KINDS; k++) {
		for (int b = 0; b < 3; b++) { /* the MMA kernels exist for fp16 and bf16 */
			snprintf(s->names[k][b], sizeof(s->names[k][b]), "attn_%s_%s_%d", kind[k],
				 s->dtype == DATAFLOW_FP32 ? "bf16" : dt, buckets[b]);
			cuda_kernel_init(&s->kernels[k][b], file[k], s->names[k][b]);
		}
		snprintf(s->names[k][3], sizeof(s->names[k][3]), "attn_%s_simt_%s", kind[k], dt);
		cuda_kernel_init(&s->kernels[k][3], file[k], s->names[k][3]);
	}
	cuda_kernel_init(&s->check, "attention.cu", "attn_cudnn_check");
	cuda_kernel_init(&s->commit, "attention.cu", "attn_cudnn_commit");
	pthread_mutex_init(&s->lock, NULL);
	state->data = s;
	state->destroy = state_destroy;
	return DATAFLOW_OK;
}

/* dataflow_cuda_<name>_init, the init the catalogue names for each attention op: the shared
 * state, with q (the op's argument q_arg) fixing the dtype. */
#define ATTENTION_INIT(name, op, q_arg)                                                                      \
	Dataflow_Status dataflow_cuda_##name##_init(Dataflow_Handle *handle, const Op_Skeleton *skeleton,   \
						    Dataflow_Op_State *state)                               \
	{                                                                                                  \
		return init(handle, skeleton, state, op, q_arg);                                           \
	}
ATTENTION_INIT(attention, OP_ATTENTION, DATAFLOW_ATTENTION_ARG_Q)
ATTENTION_INIT(attention_kv, OP_ATTENTION_KV, DATAFLOW_ATTENTION_KV_ARG_Q)
ATTENTION_INIT(attention_bwd, OP_ATTENTION_BWD, DATAFLOW_ATTENTION_BWD_ARG_Q)
ATTENTION_INIT(attention_kv_bwd, OP_ATTENTION_KV_BWD, DATAFLOW_ATTENTION_KV_BWD_ARG_Q)

/* ---- launches ---- */

static int bucket_index(int hd)
{
	return hd == 64 ? 0 : hd == 128 ? 1 : 2;
}

static Dataflow_Status launch_mma(Attn_State *s, int stream_id, int kind, int hd, int64_t total, int64_t heads,
				  Attn_Params *p)
{
	Cuda_Attn_Tile t;
	if (!cuda_attention_tile((Cuda_Attn_Kernel)kind, hd, &t))
		return dataflow_set_error(DATAFLOW_ERR_INTERNAL, "attention: no tile for head dim %d", hd);
	/* blocks of bm queries (forward, dQ) or bn keys (dK/dV) */
	int64_t blocks = cuda_attention_blocks(total, p->num_seqs, kind == CUDA_ATTN_DKDV ? t.bn : t.bm);
	void *args[] = {p};
	return cuda_kernel_launch(cuda_of(s->handle), stream_id, &s->kernels[kind][bucket_index(hd)], (uint32_t)blocks,
				  (uint32_t)heads, (uint32_t)(t.nw * 32), (uint32_t)t.smem, args);
}

static Dataflow_Status launch_simt(Attn_State *s, int stream_id, int kind, int64_t total, int64_t heads, Attn_Params *p)
{
	void *args[] = {p};
	return cuda_kernel_launch(cuda_of(s->handle), stream_id, &s->kernels[kind][3],
				  (uint32_t)((total + ATTN_SIMT_WARPS - 1) / ATTN_SIMT_WARPS), (uint32_t)heads,
				  ATTN_SIMT_WARPS * 32, 0, args);
}

/* The forward or backward kernels of the chosen native implementation. */
static Dataflow_Status run_native(Attn_State *s, int stream_id, const Cuda_Attn_Choice *c, Attn_Params *p)
{
	Dataflow_Status st;
	if (s->op == OP_ATTENTION || s->op == OP_ATTENTION_KV)
		return c->impl == CUDA_ATTN_MMA ? launch_mma(s, stream_id, CUDA_ATTN_FWD, c->hd, p->total_q, p->num_q_heads, p)
						: launch_simt(s, stream_id, CUDA_ATTN_FWD, p->total_q, p->num_q_heads, p);
	if (c->impl == CUDA_ATTN_MMA) {
		st = launch_mma(s, stream_id, CUDA_ATTN_DKDV, c->hd, p->total_k, p->num_kv_heads, p);
		return st == DATAFLOW_OK ? launch_mma(s, stream_id, CUDA_ATTN_DQ, c->hd, p->total_q, p->num_q_heads, p) : st;
	}
	st = launch_simt(s, stream_id, CUDA_ATTN_DKDV, p->total_k, p->num_kv_heads, p);
	return st == DATAFLOW_OK ? launch_simt(s, stream_id, CUDA_ATTN_DQ, p->total_q, p->num_q_heads, p) : st;
}

/* ---- cuDNN ---- */

/* The cached plan of the shape (built at its first use); called with s->lock held. */
static Plan_Entry *plan_for(Attn_State *s, const Cudnn_Sdpa_Shape *shape)
{
	for (int i = 0; i < s->num_plans; i++)
		if (!memcmp(&s->plans[i].shape, shape, sizeof(*shape)))
			return &s->plans[i];
	Plan_Entry *e = s->num_plans < MAX_PLANS ? &s->plans[s->num_plans++] : &s->plans[s->next_evict++ % MAX_PLANS];
	if (e->status == DATAFLOW_OK && e->plan.plan)
		cudnn_sdpa_release(&cudnn, &e->plan);
	memset(e, 0, sizeof(*e));
	e->shape = *shape;
	e->status = cudnn_sdpa_build(&cudnn, s->cudnn, shape, &e->plan);
	return e;
}

static uint64_t round_up(uint64_t n)
{
	return (n + 255) & ~(uint64_t)255;
}

/* Runs cuDNN into scratch, then the check and the commits; *flag is the device flag the native
 * kernels skip on. Called with s->lock held. Returns DATAFLOW_ERR_UNSUPPORTED (nothing queued)
 * when cuDNN does not take the shape. */
static Dataflow_Status run_cudnn(Attn_State *s, int stream_id, Attn_Params *p, const int **flag)
{
	Cuda_Handle *h = cuda_of(s->handle);
	if (!s->cudnn) {
		cudnnStatus_t cs = cudnn.cudnnCreate(&s->cudnn);
		if (cs != CUDNN_STATUS_SUCCESS)
			return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED, "cudnnCreate: %s", cudnn.cudnnGetErrorString(cs));
	}
	const int bwd = s->op == OP_ATTENTION_BWD;
	Cudnn_Sdpa_Shape shape = {s->dtype == DATAFLOW_FP16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16,
				  p->total_q,
				  p->num_q_heads,
				  p->num_kv_heads,
				  p->head_dim,
				  p->causal,
				  bwd};
	Plan_Entry *e = plan_for(s, &shape);
	if (e->status != DATAFLOW_OK)
		return dataflow_set_error(e->status, "cudnn sdpa: the shape was refused when its plan was built");
	/* scratch: the outputs (O and stats, or dQ, dK, dV), the flag, cuDNN's workspace */
	const uint64_t es = 2, q_bytes = (uint64_t)p->total_q * p->num_q_heads * p->head_dim * es;
	const uint64_t kv_bytes = (uint64_t)p->total_q * p->num_kv_heads * p->head_dim * es;
	const uint64_t stats_bytes = (uint64_t)p->total_q * p->num_q_heads * 4;
	uint64_t out0 = 0, out1 = round_up(q_bytes), out2 = out1 + round_up(bwd ? kv_bytes : stats_bytes);
	uint64_t flag_at = out2 + (bwd ? round_up(kv_bytes) : 0), work_at = flag_at + 256;
	uint64_t need = work_at + round_up((uint64_t)e->plan.workspace_bytes);
	Dataflow_Status st = DATAFLOW_OK;
	if (s->ws_bytes[stream_id] < need) {
		if (s->ws[stream_id])
			dataflow_free_mem(s->handle, s->ws[stream_id]); /* released once queued work is past it */
		s->ws[stream_id] = NULL;
		s->ws_bytes[stream_id] = 0;
		st = dataflow_alloc_mem(s->handle, need, &s->ws[stream_id]);
		if (st != DATAFLOW_OK)
			return st;
		s->ws_bytes[stream_id] = need;
	}
	char *ws = s->ws[stream_id];
	int *dflag = (int *)(ws + flag_at);
	long long num_seqs = p->num_seqs, total = p->total_q;
	void *check_args[] = {(void *)&p->cu_q, &num_seqs, &total, &dflag};
	st = cuda_kernel_launch(h, stream_id, &s->check, 1, 1, 32, 0, check_args);
	Cudnn_Sdpa_Args a = {.q = p->q,
			     .k = p->k,
			     .v = p->v,
			     .dout = p->dout,
			     .o = bwd ? p->out : ws + out0,
			     .stats = bwd ? (void *)p->lse_in : ws + out1,
			     .dq = ws + out0,
			     .dk = ws + out1,
			     .dv = ws + out2,
			     .scale = p->scale,
			     .workspace = e->plan.workspace_bytes ? ws + work_at : NULL};
	if (st == DATAFLOW_OK) {
		cudnnStatus_t cs = cudnn.cudnnSetStream(s->cudnn, h->streams[stream_id].stream);
		if (cs != CUDNN_STATUS_SUCCESS)
			st = dataflow_set_error(DATAFLOW_ERR_BACKEND, "cudnnSetStream: %s", cudnn.cudnnGetErrorString(cs));
	}
	if (st == DATAFLOW_OK) {
		st = cudnn_sdpa_execute(&cudnn, s->cudnn, &e->plan, &a);
		if (st == DATAFLOW_ERR_UNSUPPORTED) { /* refused at run time: the native kernels from now on */
			cudnn_sdpa_release(&cudnn, &e->plan);
			e->status = st;
		}
	}
	/* commits: scratch -> the op's outputs when the flag says cuDNN's sequence was the op's */
	struct {
		const void *src;
		void *dst;
		uint64_t bytes;
	} commits[3] = {{ws + out0, bwd ? p->dq : p->out, q_bytes},
			{ws + out1, bwd ? p->dk : (void *)p->lse, bwd ? kv_bytes : stats_bytes},
			{ws + out2, p->dv, kv_bytes}};
	for (int i = 0; i < (bwd ? 3 : 2) && st == DATAFLOW_OK; i++) {
		long long bytes = (long long)commits[i].bytes;
		Dataflow_Launch_Config c;
		cuda_elementwise_config(bytes / 16 + 1, &c);
		void *args[] = {&dflag, (void *)&commits[i].src, &commits[i].dst, &bytes};
		st = cuda_kernel_launch(h, stream_id, &s->commit, c.grid[0], 1, c.block[0], 0, args);
	}
	*flag = dflag;
	return st;
}

/* ---- the ops ---- */

static int aligned(const void *a, const void *b, const void *c, const void *d)
{
	return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d) & 15) == 0;
}

static Dataflow_Status run(Attn_State *s, int stream_id, Attn_Params *p)
{
	p->scale_log2 = p->scale * LOG2E;
	p->skip = NULL;
	const int bwd = s->op == OP_ATTENTION_BWD || s->op == OP_ATTENTION_KV_BWD;
	p->vec = p->head_dim % 8 == 0 && aligned(p->q, p->k, p->v, p->out) &&
		 (!bwd || (aligned(p->dout, p->dq, p->dk, p->dv) && aligned(p->lse_in, p->q, p->q, p->q)));
	Cuda_Attn_Problem prob = {.cc = s->cc,
				  .max_smem = s->max_smem,
				  .elem_bytes = s->dtype == DATAFLOW_FP32 ? 4 : 2,
				  .head_dim = p->head_dim,
				  .num_seqs = p->num_seqs,
				  .causal = p->causal,
				  .window = p->window,
				  .kv = s->op == OP_ATTENTION_KV || s->op == OP_ATTENTION_KV_BWD,
				  .backward = bwd,
				  .vec = p->vec,
				  .force = s->force};
	if (s->force != CUDA_ATTN_MMA && s->force != CUDA_ATTN_SIMT) {
		pthread_once(&cudnn_once, cudnn_load);
		prob.cudnn_version = cudnn_version;
	}
	Cuda_Attn_Choice c = cuda_attention_choose(&prob);
	Dataflow_Status st = DATAFLOW_OK;
	if (c.impl == CUDA_ATTN_CUDNN) {
		pthread_mutex_lock(&s->lock);
		const int *flag = NULL;
		st = run_cudnn(s, stream_id, p, &flag);
		pthread_mutex_unlock(&s->lock);
		if (st == DATAFLOW_OK) {
			snprintf(last_choice, sizeof(last_choice), "cudnn %d (%s)", cudnn_version, c.reason);
			p->skip = flag; /* the native kernels below cover what cuDNN's result cannot */
		} else if (st == DATAFLOW_ERR_UNSUPPORTED) {
			snprintf(last_choice, sizeof(last_choice), "native: cuDNN refused: %.120s", dataflow_last_error());
			st = DATAFLOW_OK;
		}
		if (st != DATAFLOW_OK)
			return st;
		prob.cudnn_version = 0; /* the native fallback, or the kernels that cover cuDNN's gaps */
		c = cuda_attention_choose(&prob);
	} else {
		if (c.impl == CUDA_ATTN_MMA)
			snprintf(last_choice, sizeof(last_choice), "mma d%d (%s)", c.hd, c.reason);
		else
			snprintf(last_choice, sizeof(last_choice), "simt (%s)", c.reason);
	}
	return run_native(s, stream_id, &c, p);
}

/* attention_kv's arguments, and attention's as attention_kv's */
static Dataflow_Status forward(void *op_state, int stream_id, Dataflow_Attention_Kv_Args a)
{
	Attn_Params p = {.q = a.q, .k = a.k, .v = a.v, .cu_q = a.cu_seqlens_q, .cu_k = a.cu_seqlens_k, .out = a.out,
			 .lse = a.lse, .total_q = a.total_q, .total_k = a.total_k, .num_seqs = a.num_seqs,
			 .num_q_heads = a.num_q_heads, .num_kv_heads = a.num_kv_heads, .head_dim = a.head_dim,
			 .scale = a.scale, .causal = a.causal != 0, .window = a.window};
	return run(op_state, stream_id, &p);
}

Dataflow_Status dataflow_cuda_attention(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state)
{
	(void)handle;
	return forward(op_state, stream_id, dataflow_attention_as_kv_args(op->op_args));
}

Dataflow_Status dataflow_cuda_attention_kv(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state)
{
	(void)handle;
	return forward(op_state, stream_id, dataflow_attention_kv_args(op->op_args));
}

Dataflow_Status dataflow_cuda_attention_bwd(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state)
{
	(void)handle;
	Dataflow_Attention_Bwd_Args a = dataflow_attention_bwd_args(op->op_args);
	Attn_Params p = {.q = a.q, .k = a.k, .v = a.v, .cu_q = a.cu_seqlens, .cu_k = a.cu_seqlens, .out = (void *)a.out,
			 .dout = a.dout, .lse_in = a.lse, .D = a.D, .dq = a.dq, .dk = a.dk, .dv = a.dv,
			 .total_q = a.total_tokens, .total_k = a.total_tokens, .num_seqs = a.num_seqs,
			 .num_q_heads = a.num_q_heads, .num_kv_heads = a.num_kv_heads, .head_dim = a.head_dim,
			 .scale = a.scale, .causal = a.causal != 0, .window = a.window};
	return run(op_state, stream_id, &p);
}

Dataflow_Status dataflow_cuda_attention_kv_bwd(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state)
{
	(void)handle;
	Dataflow_Attention_Kv_Bwd_Args a = dataflow_attention_kv_bwd_args(op->op_args);
	Attn_Params p = {.q = a.q, .k = a.k, .v = a.v, .cu_q = a.cu_seqlens_q, .cu_k = a.cu_seqlens_k,
			 .out = (void *)a.out, .dout = a.dout, .lse_in = a.lse, .D = a.D, .dq = a.dq, .dk = a.dk,
			 .dv = a.dv, .total_q = a.total_q, .total_k = a.total_k, .num_seqs = a.num_seqs,
			 .num_q_heads = a.num_q_heads, .num_kv_heads = a.num_kv_heads, .head_dim = a.head_dim,
			 .scale = a.scale, .causal = a.causal != 0, .window = a.window, .accumulate = 1};
	return run(op_state, stream_id, &p);
}
