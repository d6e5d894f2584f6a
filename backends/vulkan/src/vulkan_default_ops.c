#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dataflow/default_ops.h"
#include "dataflow/op_args.h"
#include "vulkan_backend.h"

/* The default ops of the Vulkan backend: their launch functions (native ops) and matmul (an
 * external op over its own kernels), found by register_default_ops in this library
 * (dataflow_handle_default_ops_library); the kernels are the SPIR-V of shaders/, embedded by
 * the generated vulkan_shaders.c. */

#define GROUP 256         /* local_size_x of the 1-D kernels */
#define MAX_GROUPS 65535  /* kernels loop over the rest (grid-stride) */
#define MATMUL_TILE 64    /* matmul.comp's TILE */

/* Indices in the kernels are 32-bit: an op whose tensors have 2^32 elements or more is refused. */
static Dataflow_Status fits_32_bits(const Op *op, int64_t elements, const char *what)
{
	if (elements > (int64_t)UINT32_MAX)
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED, "%s (vulkan): %s: at most %u elements, got %lld",
					  op->skeleton.nickname, what, UINT32_MAX, (long long)elements);
	return DATAFLOW_OK;
}

/* A 1-D dispatch of `items` work items, per_group per workgroup; kernels loop over the rest
 * (grid-stride), so the count is capped at MAX_GROUPS. */
static void groups_for(int64_t items, int64_t per_group, Dataflow_Launch_Config *c)
{
	int64_t groups = (items + per_group - 1) / per_group;
	c->grid[0] = (uint32_t)(groups < MAX_GROUPS ? groups : MAX_GROUPS);
	c->grid[1] = c->grid[2] = 1;
}

/* The launch function of op OP (its arguments as `a`, of type Args): `size` is its largest
 * tensor in elements, `items` the kernel's work items, `per_group` per workgroup. */
#define VULKAN_LAUNCH(OP, Args, size, items, per_group)                                                      \
	Dataflow_Status dataflow_vulkan_##OP##_launch(Dataflow_Handle *handle, const Op *op, void *op_state,   \
						      Dataflow_Launch_Config *config)                  \
	{                                                                                          \
		(void)handle, (void)op_state;                                                      \
		Args a = dataflow_##OP##_args(op->op_args);                      \
		if (fits_32_bits(op, (size), #size) != DATAFLOW_OK)                                \
			return dataflow_last_status();                                             \
		groups_for((items), (per_group), config);                                          \
		return DATAFLOW_OK;                                                                \
	}

/* elementwise: one invocation per element of n, GROUP per workgroup */
VULKAN_LAUNCH(add, Dataflow_Add_Args, a.n, a.n, GROUP)
VULKAN_LAUNCH(scale, Dataflow_Scale_Args, a.n, a.n, GROUP)
VULKAN_LAUNCH(cast, Dataflow_Cast_Args, a.n, a.n, GROUP)
VULKAN_LAUNCH(set_mem, Dataflow_Set_Mem_Args, a.n, a.n, GROUP)

/* rms_norm forward and bwd_x: ROW_GROUP rows of 16 lanes per workgroup (shaders/row_sum.glsl);
 * bwd_w: one invocation per (block, column), then per column */
#define ROW_GROUP 4
#define BWD_W_BLOCKS(a) (((a).rows + DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS - 1) / DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS)
VULKAN_LAUNCH(rms_norm, Dataflow_Rms_Norm_Args, a.rows * a.hidden, a.rows, ROW_GROUP)
VULKAN_LAUNCH(rms_norm_bwd_x, Dataflow_Rms_Norm_Bwd_X_Args, a.rows * a.hidden, a.rows, ROW_GROUP)
VULKAN_LAUNCH(rms_norm_bwd_w_partials, Dataflow_Rms_Norm_Bwd_W_Partials_Args, a.rows * a.hidden, BWD_W_BLOCKS(a) * a.hidden, GROUP)
VULKAN_LAUNCH(rms_norm_bwd_w_reduce, Dataflow_Rms_Norm_Bwd_W_Reduce_Args, BWD_W_BLOCKS(a) * a.hidden, a.hidden, GROUP)

/* swiglu: one invocation per element; rope: per (i, i + head_dim/2) pair of each token and
 * head; embedding: per element of out; embedding_bwd_w: per column (each walks the tokens) */
VULKAN_LAUNCH(swiglu, Dataflow_Swiglu_Args, a.rows * a.ffn, a.rows * a.ffn, GROUP)
VULKAN_LAUNCH(swiglu_bwd, Dataflow_Swiglu_Bwd_Args, a.rows * a.ffn, a.rows * a.ffn, GROUP)
VULKAN_LAUNCH(rope, Dataflow_Rope_Args, a.num_tokens * a.num_heads * a.head_dim,
	      a.num_tokens * a.num_heads * (a.head_dim / 2), GROUP)
VULKAN_LAUNCH(rope_bwd, Dataflow_Rope_Bwd_Args, a.num_tokens * a.num_heads * a.head_dim,
	      a.num_tokens * a.num_heads * (a.head_dim / 2), GROUP)
#define LARGER(x, y) ((x) > (y) ? (x) : (y))
VULKAN_LAUNCH(embedding, Dataflow_Embedding_Args, LARGER(a.vocab, a.num_tokens) * a.hidden, a.num_tokens * a.hidden,
	      GROUP)
VULKAN_LAUNCH(embedding_bwd_w, Dataflow_Embedding_Bwd_W_Args, LARGER(a.vocab, a.num_tokens) * a.hidden, a.hidden,
	      GROUP)

/* cross_entropy: one workgroup per row */
VULKAN_LAUNCH(cross_entropy, Dataflow_Cross_Entropy_Args, a.tokens * a.vocab, a.tokens, 1)

/* grad_norm_sq: partials 4 blocks per workgroup, then one invocation sums them in order;
 * clip_by_global_norm: one invocation */
#define GRAD_NORM_BLOCKS(n) (((n) + DATAFLOW_GRAD_NORM_BLOCK - 1) / DATAFLOW_GRAD_NORM_BLOCK)
VULKAN_LAUNCH(grad_norm_sq_partials, Dataflow_Grad_Norm_Sq_Partials_Args, a.n, GRAD_NORM_BLOCKS(a.n), 4)
VULKAN_LAUNCH(grad_norm_sq_reduce, Dataflow_Grad_Norm_Sq_Reduce_Args, a.num_blocks, 1, 1)

/* attention, attention_kv: one workgroup per (query head, query); attention_bwd and
 * attention_kv_bwd (below): per (kv head, key) and per (query head, query);
 * attention_bwd_delta: one invocation per (token, head) row, ATTN_GROUP per workgroup */
#define ATTN_GROUP 64 /* local_size_x of attention_bwd_delta */
VULKAN_LAUNCH(attention, Dataflow_Attention_Args, a.total_tokens * a.num_q_heads * a.head_dim,
	      a.total_tokens * a.num_q_heads, 1)
VULKAN_LAUNCH(attention_kv, Dataflow_Attention_Kv_Args,
	      LARGER(a.total_q * a.num_q_heads, a.total_k * a.num_kv_heads) * a.head_dim, a.total_q * a.num_q_heads, 1)
VULKAN_LAUNCH(attention_bwd_delta, Dataflow_Attention_Bwd_Delta_Args, a.total_tokens * a.num_q_heads * a.head_dim,
	      a.total_tokens * a.num_q_heads, ATTN_GROUP)

Dataflow_Status dataflow_vulkan_clip_by_global_norm_launch(Dataflow_Handle *handle, const Op *op, void *op_state,
							   Dataflow_Launch_Config *config)
{
	(void)handle, (void)op, (void)op_state;
	groups_for(1, 1, config);
	return DATAFLOW_OK;
}

/* ---- matmul: the variant's kernel, chosen at registration ---- */

/* A kernel this library exports (vulkan_shaders.c), by name. */
static const Dataflow_Vulkan_Shader *own_shader(const char *name)
{
	Dl_info self;
	if (!dladdr((void *)&own_shader, &self))
		return NULL;
	void *lib = dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD);
	const Dataflow_Vulkan_Shader *shader = lib ? dlsym(lib, name) : NULL;
	if (lib)
		dlclose(lib);
	return shader;
}

/* An external op's state: its variant's kernel, dataflow_vulkan_<op>_<the dtypes of its slots>,
 * the slots' dtypes read from the arguments slot_args[0 .. num_slots - 1]. */
static Dataflow_Status variant_kernel(const Op_Skeleton *skeleton, int num_slots, const int *slot_args,
				      Dataflow_Op_State *state)
{
	char name[160];
	int at = snprintf(name, sizeof(name), "dataflow_vulkan_%s", skeleton->nickname);
	for (int i = 0; i < num_slots; i++)
		at += snprintf(name + at, sizeof(name) - (size_t)at, "_%s",
			       dataflow_datatype_name(skeleton->arg_dtypes[slot_args[i]]));
	const Dataflow_Vulkan_Shader *shader = own_shader(name);
	if (!shader)
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED, "%s (vulkan): no kernel %s", skeleton->nickname, name);
	Vulkan_Op *rec = calloc(1, sizeof(*rec));
	if (!rec)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "%s (vulkan): no memory", skeleton->nickname);
	rec->shader = shader;
	snprintf(rec->kernel_name, sizeof(rec->kernel_name), "%s", name);
	*state = (Dataflow_Op_State){rec, free};
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_vulkan_matmul_init(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
					    Dataflow_Op_State *state)
{
	(void)handle;
	return variant_kernel(skeleton, 2, (const int[]){DATAFLOW_MATMUL_ARG_A, DATAFLOW_MATMUL_ARG_D}, state);
}

Dataflow_Status dataflow_vulkan_matmul(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state)
{
	Dataflow_Matmul_Args a = dataflow_matmul_args(op->op_args);
	if (a.M * a.K > (int64_t)UINT32_MAX || a.K * a.N > (int64_t)UINT32_MAX || a.M * a.N > (int64_t)UINT32_MAX)
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "matmul (vulkan): M = %lld, N = %lld, K = %lld: each operand must have at most %u "
					  "elements (32-bit indices)",
					  (long long)a.M, (long long)a.N, (long long)a.K, UINT32_MAX);
	int64_t gx = (a.N + MATMUL_TILE - 1) / MATMUL_TILE, gy = (a.M + MATMUL_TILE - 1) / MATMUL_TILE;
	uint32_t *max = vulkan_of(handle)->dev->props.limits.maxComputeWorkGroupCount;
	if (gx > max[0] || gy > max[1])
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "matmul (vulkan): M = %lld, N = %lld need %lld x %lld workgroups; the device "
					  "allows %u x %u",
					  (long long)a.M, (long long)a.N, (long long)gx, (long long)gy, max[0], max[1]);
	const uint32_t groups[3] = {(uint32_t)gx, (uint32_t)gy, 1};
	return vulkan_dispatch(vulkan_of(handle), stream_id, op_state, op, groups);
}

/* ---- adamw_step: an external op, so that its per-step constants are formed on the host ----
 * In double from the host's doubles (pow, sqrt) and rounded once to fp32, as the host kernel
 * does (backends/host/kernels/adamw_step.c); the kernel (shaders/adamw_step.comp) gets the
 * op's first 7 arguments and then these, packed like a skeleton's arguments. */

Dataflow_Status dataflow_vulkan_adamw_step_init(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
						Dataflow_Op_State *state)
{
	(void)handle;
	return variant_kernel(skeleton, 2, (const int[]){DATAFLOW_ADAMW_STEP_ARG_PARAM, DATAFLOW_ADAMW_STEP_ARG_GRAD},
			      state);
}

#define ADAMW_TENSOR_ARGS 7 /* n, param, grad, m, v, master, scale */
enum { ADAMW_DECAY, ADAMW_W1, ADAMW_BETA2, ADAMW_C2, ADAMW_NEG_STEP_SIZE, ADAMW_BC2_SQRT, ADAMW_EPS, ADAMW_FLOATS };

Dataflow_Status dataflow_vulkan_adamw_step(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state)
{
	Dataflow_Adamw_Step_Args a = dataflow_adamw_step_args(op->op_args);
	if (fits_32_bits(op, a.n, "n") != DATAFLOW_OK)
		return dataflow_last_status();
	double bc1 = 1.0 - pow(a.beta1, (double)a.step), bc2 = 1.0 - pow(a.beta2, (double)a.step);
	float c[ADAMW_FLOATS] = {
		[ADAMW_DECAY] = (float)(1.0 - a.lr * a.weight_decay),
		[ADAMW_W1] = (float)(1.0 - a.beta1),
		[ADAMW_BETA2] = (float)a.beta2,
		[ADAMW_C2] = (float)(1.0 - a.beta2),
		[ADAMW_NEG_STEP_SIZE] = (float)(-(a.lr / bc1)),
		[ADAMW_BC2_SQRT] = (float)sqrt(bc2),
		[ADAMW_EPS] = (float)a.eps,
	};
	int32_t lerp_small = fabsf(c[ADAMW_W1]) < 0.5f;
	Op k = {.skeleton = op->skeleton};
	k.skeleton.num_args = ADAMW_TENSOR_ARGS + ADAMW_FLOATS + 1;
	for (int i = 0; i < ADAMW_TENSOR_ARGS; i++)
		k.op_args[i] = op->op_args[i];
	for (int i = 0; i < ADAMW_FLOATS; i++) {
		k.skeleton.arg_dtypes[ADAMW_TENSOR_ARGS + i] = DATAFLOW_FP32_SCALAR;
		k.op_args[ADAMW_TENSOR_ARGS + i] = &c[i];
	}
	k.skeleton.arg_dtypes[ADAMW_TENSOR_ARGS + ADAMW_FLOATS] = DATAFLOW_INT32_SCALAR;
	k.op_args[ADAMW_TENSOR_ARGS + ADAMW_FLOATS] = &lerp_small;
	Dataflow_Launch_Config config;
	groups_for(a.n, GROUP, &config);
	return vulkan_dispatch(vulkan_of(handle), stream_id, op_state, &k, config.grid);
}

/* ---- attention_bwd, attention_kv_bwd: external ops, so that their arguments fit 128 bytes of
 * push constants (the least a device may offer): their int64 scalars go as 32-bit words, which
 * the kernels (DATAFLOW_<OP>_PARAMS_NARROW, shaders/attention_bwd.glsl) read as uint: all are
 * below 2^32 (the catalogue bounds the token counts and num_seqs, the 32-bit index check the
 * heads and head_dim). One workgroup per (kv head, key) and per (query head, query). */

static Dataflow_Status attention_bwd_dispatch(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state,
					      int64_t q_rows, int64_t k_rows, int64_t head_dim)
{
	int64_t items = q_rows + k_rows;
	if (fits_32_bits(op, LARGER(LARGER(q_rows, k_rows) * head_dim, items),
			 "(tokens * heads) * head_dim of q and of k, and their sum of rows") != DATAFLOW_OK)
		return dataflow_last_status();
	Op k = *op;
	int32_t narrow[DATAFLOW_MAX_OP_ARGS];
	for (int i = 0; i < op->skeleton.num_args; i++)
		if (op->skeleton.arg_dtypes[i] == DATAFLOW_INT64_SCALAR) {
			narrow[i] = (int32_t)(uint32_t)*(const int64_t *)op->op_args[i]; /* < 2^32, as above */
			k.skeleton.arg_dtypes[i] = DATAFLOW_INT32_SCALAR;
			k.op_args[i] = &narrow[i];
		}
	Dataflow_Launch_Config config;
	groups_for(items, 1, &config);
	return vulkan_dispatch(vulkan_of(handle), stream_id, op_state, &k, config.grid);
}

/* The external op OP (its arguments as `a`, of type Args): its init picks the variant's kernel
 * by q's dtype; q_rows and k_rows are its (token, head) rows of q and of k. */
#define VULKAN_ATTENTION_BWD(OP, Args, ARG_Q, q_rows, k_rows)                                                \
	Dataflow_Status dataflow_vulkan_##OP##_init(Dataflow_Handle *handle, const Op_Skeleton *skeleton,     \
						    Dataflow_Op_State *state)                                 \
	{                                                                                                    \
		(void)handle;                                                                                \
		return variant_kernel(skeleton, 1, (const int[]){ARG_Q}, state);                             \
	}                                                                                                    \
	Dataflow_Status dataflow_vulkan_##OP(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state) \
	{                                                                                                    \
		Args a = dataflow_##OP##_args(op->op_args);                                                  \
		return attention_bwd_dispatch(handle, stream_id, op, op_state, (q_rows), (k_rows), a.head_dim); \
	}

VULKAN_ATTENTION_BWD(attention_bwd, Dataflow_Attention_Bwd_Args, DATAFLOW_ATTENTION_BWD_ARG_Q,
		     a.total_tokens * a.num_q_heads, a.total_tokens * a.num_kv_heads)
VULKAN_ATTENTION_BWD(attention_kv_bwd, Dataflow_Attention_Kv_Bwd_Args, DATAFLOW_ATTENTION_KV_BWD_ARG_Q,
		     a.total_q * a.num_q_heads, a.total_k * a.num_kv_heads)
