#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
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
#define MATMUL_KT 16      /* and its KT */

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

/* ---- loop counts, for devices that bound them (Vulkan_Device.max_loop_iterations: lavapipe) ----
 * The most passes through the ends of loops one invocation of a kernel makes, all its loops
 * together, as Mesa counts them (vulkan_backend.h): a loop of n iterations whose body makes b
 * costs LOOP(n, b), n passes plus one to leave, and a pass more per iteration where its body
 * holds loops (b > 0): measured on lavapipe (attention_kv's forward with one iteration a pass,
 * head_dim 1 to 192: a pass per key block more than that; matmul's loop over K, with none
 * inside: none more). The forward as it is now runs a pass per block less than counted.
 * Loops are counted as the shader writes them, constant trip counts too, except those it marks
 * [[unroll]]; a lane that loops less is counted as the busiest (lanes run in SIMD batches).
 * In double: absurd shapes pass 2^64. */
#define LOOP(n, body) ((double)(n) * ((body) + ((body) > 0 ? 2.0 : 1.0)) + 1.0)
#define CDIV(x, y) (((x) + (y) - 1) / (y))

/* Iterations of a kernel's grid-stride loop over `items`, per_group per workgroup (groups_for). */
static double grid_passes(int64_t items, int64_t per_group)
{
	if (items <= 0)
		return 0;
	int64_t groups = CDIV(items, per_group);
	groups = groups < MAX_GROUPS ? groups : MAX_GROUPS;
	return (double)CDIV(items, groups * per_group);
}

/* Refuses a launch whose kernel would loop more than the device allows; `shape` (printf) names
 * the arguments that set the count. */
static Dataflow_Status loops_fit(Dataflow_Handle *handle, const Op *op, double loops, const char *shape, ...)
{
	const Vulkan_Device *dev = vulkan_of(handle)->dev;
	if (dev->max_loop_iterations == 0 || loops <= dev->max_loop_iterations)
		return DATAFLOW_OK;
	char what[160];
	va_list ap;
	va_start(ap, shape);
	vsnprintf(what, sizeof(what), shape, ap);
	va_end(ap);
	return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
				  "%s (vulkan): %s needs %.0f loop iterations in one kernel invocation, more than the %u "
				  "that this device's driver runs (%s: Mesa's llvmpipe ends a shader's loops after "
				  "LP_MAX_TGSI_LOOP_ITERATIONS in all, silently) - make the shape smaller or use another "
				  "device",
				  op->skeleton.nickname, what, loops, dev->max_loop_iterations, dev->props.deviceName);
}

/* The launch function of op OP (its arguments as `a`, of type Args): `size` is its largest
 * tensor in elements, `items` the kernel's work items, `per_group` per workgroup, `loops` the
 * kernel's loop count (G: the grid-stride passes) and the rest the shape that sets it. */
#define VULKAN_LAUNCH(OP, Args, size, items, per_group, loops, ...)                                           \
	Dataflow_Status dataflow_vulkan_##OP##_launch(Dataflow_Handle *handle, const Op *op, void *op_state,   \
						      Dataflow_Launch_Config *config)                  \
	{                                                                                          \
		(void)op_state;                                                                    \
		Args a = dataflow_##OP##_args(op->op_args);                                        \
		if (fits_32_bits(op, (size), #size) != DATAFLOW_OK)                                \
			return dataflow_last_status();                                             \
		double G = grid_passes((items), (per_group)); /* unused by a kernel without one */ \
		(void)G;                                                                           \
		if (loops_fit(handle, op, (loops), __VA_ARGS__) != DATAFLOW_OK)                    \
			return dataflow_last_status();                                             \
		groups_for((items), (per_group), config);                                          \
		return DATAFLOW_OK;                                                                \
	}

/* The standard launch classes (the catalogue's `launch`), each with its loop count; the last
 * arguments are the catalogue's texts of the parameters, which the messages name:
 *   elementwise(items)                 one invocation per item, GROUP per workgroup (FOR_EACH_INDEX)
 *   rows(rows, row_elems, vector_arg)  ROW_GROUP rows of 16 lanes per workgroup
 *                                      (shaders/row_sum.glsl: ROW_SUM, then a pass over the row)
 *   block(threads)                     one workgroup (the shader's size), no loops */
#define ROW_GROUP 4
#define ROW_LOOPS(h) (LOOP((h) / 16, 0) + LOOP(8, 0) + LOOP(4, 0) + LOOP((h) % 16, 0) + LOOP(CDIV(h, 16), 0))
#define VULKAN_ELEMENTWISE(OP, Args, items, items_text) \
	VULKAN_LAUNCH(OP, Args, items, items, GROUP, LOOP(G, 0), items_text " = %lld", (long long)(items))
#define VULKAN_ROWS(OP, Args, rows, row_elems, vector_arg, rows_text, row_elems_text)                       \
	VULKAN_LAUNCH(OP, Args, (rows) * (row_elems), rows, ROW_GROUP, LOOP(G, ROW_LOOPS(row_elems)),         \
		      row_elems_text " = %lld, " rows_text " = %lld", (long long)(row_elems), (long long)(rows))
#define VULKAN_BLOCK(OP, Args, threads, threads_text)                                                         \
	Dataflow_Status dataflow_vulkan_##OP##_launch(Dataflow_Handle *handle, const Op *op, void *op_state,   \
						      Dataflow_Launch_Config *config)                  \
	{                                                                                                     \
		(void)handle, (void)op, (void)op_state;                                                       \
		groups_for(1, 1, config);                                                                     \
		return DATAFLOW_OK;                                                                           \
	}
#include "dataflow/vulkan_launches.inc"

/* The custom launches. */

/* rms_norm's weight gradient: one invocation per (block, column), then per column */
#define BWD_W_BLOCKS(a) CDIV((a).rows, DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS)
VULKAN_LAUNCH(rms_norm_bwd_w_partials, Dataflow_Rms_Norm_Bwd_W_Partials_Args, a.rows * a.hidden,
	      BWD_W_BLOCKS(a) * a.hidden, GROUP, LOOP(G, LOOP(DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS, 0)),
	      "rows = %lld, hidden = %lld", (long long)a.rows, (long long)a.hidden)
VULKAN_LAUNCH(rms_norm_bwd_w_reduce, Dataflow_Rms_Norm_Bwd_W_Reduce_Args, BWD_W_BLOCKS(a) * a.hidden, a.hidden, GROUP,
	      LOOP(G, LOOP(BWD_W_BLOCKS(a), 0)), "rows = %lld", (long long)a.rows)

/* rope: one invocation per (i, i + head_dim/2) pair of each token and head; embedding: per
 * element of out; embedding_bwd_w: per column (each walks the tokens) */
#define ROPE_ITEMS(a) ((a).num_tokens * (a).num_heads * ((a).head_dim / 2))
VULKAN_LAUNCH(rope, Dataflow_Rope_Args, a.num_tokens * a.num_heads * a.head_dim, ROPE_ITEMS(a), GROUP, LOOP(G, 0),
	      "num_tokens * num_heads * head_dim / 2 = %lld", (long long)ROPE_ITEMS(a))
VULKAN_LAUNCH(rope_bwd, Dataflow_Rope_Bwd_Args, a.num_tokens * a.num_heads * a.head_dim, ROPE_ITEMS(a), GROUP,
	      LOOP(G, 0), "num_tokens * num_heads * head_dim / 2 = %lld", (long long)ROPE_ITEMS(a))
#define LARGER(x, y) ((x) > (y) ? (x) : (y))
VULKAN_LAUNCH(embedding, Dataflow_Embedding_Args, LARGER(a.vocab, a.num_tokens) * a.hidden, a.num_tokens * a.hidden,
	      GROUP, LOOP(G, 0), "num_tokens * hidden = %lld", (long long)(a.num_tokens * a.hidden))
VULKAN_LAUNCH(embedding_bwd_w, Dataflow_Embedding_Bwd_W_Args, LARGER(a.vocab, a.num_tokens) * a.hidden, a.hidden,
	      GROUP, LOOP(G, LOOP(a.num_tokens, 0)), "num_tokens = %lld", (long long)a.num_tokens)

/* qmatmul_int8 / _int4: one invocation per output (m, n), each a pass over K in 16-wide steps
 * (the inner 16 unrolled) and the K % 16 tail (shaders/qmatmul.glsl) */
#define QMATMUL_LOOPS(a) LOOP(G, LOOP((a).K / 16, 0) + LOOP((a).K % 16, 0))
VULKAN_LAUNCH(qmatmul_int8, Dataflow_Qmatmul_Int8_Args, LARGER(a.M, a.N) * a.K + a.M * a.N, a.M * a.N, GROUP,
	      QMATMUL_LOOPS(a), "K = %lld, M * N = %lld", (long long)a.K, (long long)(a.M * a.N))
VULKAN_LAUNCH(qmatmul_int4, Dataflow_Qmatmul_Int4_Args, LARGER(a.M, a.N) * a.K + a.M * a.N, a.M * a.N, GROUP,
	      QMATMUL_LOOPS(a), "K = %lld, M * N = %lld", (long long)a.K, (long long)(a.M * a.N))

/* cross_entropy: one workgroup per row: two passes over the row's vocab / 32 elements per lane,
 * and lane 0's two over the 32 lanes */
VULKAN_LAUNCH(cross_entropy, Dataflow_Cross_Entropy_Args, a.tokens * a.vocab, a.tokens, 1,
	      LOOP(G, 2 * LOOP(CDIV(a.vocab, 32), 0) + LOOP(31, 0) + LOOP(32, 0)), "vocab = %lld, tokens = %lld",
	      (long long)a.vocab, (long long)a.tokens)

/* grad_norm_sq: partials 4 blocks per workgroup (16 lanes over a block, lane 0 folds the 16),
 * then one invocation sums them in order; clip_by_global_norm: one invocation */
#define GRAD_NORM_BLOCKS(n) CDIV(n, DATAFLOW_GRAD_NORM_BLOCK)
VULKAN_LAUNCH(grad_norm_sq_partials, Dataflow_Grad_Norm_Sq_Partials_Args, a.n, GRAD_NORM_BLOCKS(a.n), 4,
	      LOOP(G, LOOP(DATAFLOW_GRAD_NORM_BLOCK / 16, 0) + LOOP(16, 0) + LOOP(4, LOOP(8, 0))), "n = %lld",
	      (long long)a.n)
VULKAN_LAUNCH(grad_norm_sq_reduce, Dataflow_Grad_Norm_Sq_Reduce_Args, a.num_blocks, 1, 1, LOOP(a.num_blocks, 0),
	      "num_blocks = %lld", (long long)a.num_blocks)

/* attention, attention_kv: one workgroup per (query head, query); attention_bwd and
 * attention_kv_bwd (below): per (kv head, key) and per (query head, query); attention_bwd_delta: one invocation per
 * (token, head) row, ATTN_GROUP per workgroup.
 * Their loops (shaders/attention.glsl, attention_fwd.glsl, attention_bwd.glsl), per item: the
 * search for the item's sequence (at most num_seqs), the head dimensions a lane owns (d / 64,
 * rounded up; ATTN_DIMS at most), and per block of 64 keys (queries) the dot products over d
 * and the block's 64 weights (the forward's ATTN_UNROLL a pass); the sequence's length is
 * bounded by all the keys (the offsets are on the device). */
#define ATTN_GROUP 64 /* local_size_x of attention_bwd_delta */
#define ATTN_BLOCK 64 /* shaders/attention.glsl */
#define ATTN_DIMS (DATAFLOW_ATTENTION_MAX_HEAD_DIM / ATTN_BLOCK)
#define ATTN_ITEM_LOOPS(num_seqs, d) (LOOP(num_seqs, 0) + LOOP(ATTN_DIMS, 0) + 2 * LOOP(CDIV(d, ATTN_BLOCK), 0))
#define ATTN_UNROLL 8  /* the forward's inner loops' iterations per pass (ATTN_FOR_EACH) */
#define ATTN_INNER(n) LOOP(CDIV(n, ATTN_UNROLL), 0)
#define ATTN_FWD_BLOCK(d) \
	(ATTN_INNER(d) + 2 * ATTN_INNER(ATTN_BLOCK) + LOOP(CDIV(d, ATTN_BLOCK), ATTN_INNER(ATTN_BLOCK)))
#define ATTN_FWD_LOOPS(keys, num_seqs, d)                                                                    \
	(ATTN_ITEM_LOOPS(num_seqs, d) + LOOP(CDIV(keys, ATTN_BLOCK), ATTN_FWD_BLOCK(d)))
VULKAN_LAUNCH(attention, Dataflow_Attention_Args, a.total_tokens * a.num_q_heads * a.head_dim,
	      a.total_tokens * a.num_q_heads, 1, LOOP(G, ATTN_FWD_LOOPS(a.total_tokens, a.num_seqs, a.head_dim)),
	      "total_tokens = %lld, head_dim = %lld, num_seqs = %lld", (long long)a.total_tokens,
	      (long long)a.head_dim, (long long)a.num_seqs)
VULKAN_LAUNCH(attention_kv, Dataflow_Attention_Kv_Args,
	      LARGER(a.total_q * a.num_q_heads, a.total_k * a.num_kv_heads) * a.head_dim, a.total_q * a.num_q_heads, 1,
	      LOOP(G, ATTN_FWD_LOOPS(a.total_k, a.num_seqs, a.head_dim)),
	      "total_k = %lld, head_dim = %lld, num_seqs = %lld, total_q * num_q_heads = %lld", (long long)a.total_k,
	      (long long)a.head_dim, (long long)a.num_seqs, (long long)(a.total_q * a.num_q_heads))
/* paged_kv_write: one invocation per element of k; paged_attention_combine: one workgroup per
 * (query head, token), its loops the search for the sequence, the splits twice (the second
 * over the lane's head dimensions) and the store. */
VULKAN_LAUNCH(paged_kv_write, Dataflow_Paged_Kv_Write_Args, a.num_pages * a.page_size * a.num_kv_heads * a.head_dim,
	      a.num_tokens * a.num_kv_heads * a.head_dim, GROUP, LOOP(G, 0), "num_tokens = %lld", (long long)a.num_tokens)
VULKAN_LAUNCH(paged_attention_combine, Dataflow_Paged_Attention_Combine_Args,
	      a.num_splits * a.total_q * a.num_q_heads * (a.head_dim + 2), a.total_q * a.num_q_heads, 1,
	      LOOP(G, LOOP(a.batch, 0) + LOOP(a.num_splits, 0) + LOOP(a.num_splits, LOOP(CDIV(a.head_dim, ATTN_BLOCK), 0)) +
			      LOOP(ATTN_DIMS, 0) + LOOP(CDIV(a.head_dim, ATTN_BLOCK), 0)),
	      "batch = %lld, num_splits = %lld, head_dim = %lld", (long long)a.batch, (long long)a.num_splits,
	      (long long)a.head_dim)
VULKAN_LAUNCH(attention_bwd_delta, Dataflow_Attention_Bwd_Delta_Args, a.total_tokens * a.num_q_heads * a.head_dim,
	      a.total_tokens * a.num_q_heads, ATTN_GROUP, LOOP(G, LOOP(a.head_dim, 0)),
	      "total_tokens * num_q_heads = %lld, head_dim = %lld", (long long)(a.total_tokens * a.num_q_heads),
	      (long long)a.head_dim)

/* ---- mixture of experts (shaders/moe_*.comp) ----
 * One invocation per token (router_bwd, aux_loss_bwd: passes over the experts and the top_k),
 * per expert (router_stats: over every assignment and token), per element of y (combine: over
 * top_k), per assignment (combine_bwd: over hidden); aux_loss is one invocation and
 * permute_index one workgroup of 256 (each invocation's experts, each over every assignment). */
#define MOE_GROUP 64
/* moe_router: per token, the softmax's three passes, torch_topk.cuh (bounded: introselect's at
 * most 2 lg E + 1 partitions of at most 4 E + 8 passes each, its heap-select fallback and
 * partial_sort's heaps at most 3 E (lg E + 1), the insertion sorts (k - 1 elements, then at
 * most 3)) and two passes over the top k */
static double moe_router_loops(int64_t experts, int64_t top_k)
{
	double lg = floor(log2((double)experts));
	return 3 * LOOP(experts, 0) + (2 * lg + 1) * (4.0 * (double)experts + 8) + 3.0 * (double)experts * (lg + 1) +
	       LOOP(top_k, LOOP(top_k, 0)) + LOOP(3, LOOP(3, 0)) + 2 * LOOP(top_k, 0);
}
VULKAN_LAUNCH(moe_router, Dataflow_Moe_Router_Args, a.tokens * a.experts, a.tokens, MOE_GROUP,
	      LOOP(G, moe_router_loops(a.experts, a.top_k)), "experts = %lld, top_k = %lld, tokens = %lld",
	      (long long)a.experts, (long long)a.top_k, (long long)a.tokens)
VULKAN_LAUNCH(moe_router_bwd, Dataflow_Moe_Router_Bwd_Args, a.tokens * a.experts, a.tokens, MOE_GROUP,
	      LOOP(G, 4 * LOOP(a.experts, 0) + 3 * LOOP(a.top_k, 0)), "experts = %lld, top_k = %lld, tokens = %lld",
	      (long long)a.experts, (long long)a.top_k, (long long)a.tokens)
VULKAN_LAUNCH(moe_router_stats, Dataflow_Moe_Router_Stats_Args, a.tokens * a.experts, a.experts, MOE_GROUP,
	      LOOP(G, LOOP(a.tokens * a.top_k, 0) + LOOP(a.tokens, 0)), "tokens = %lld, top_k = %lld",
	      (long long)a.tokens, (long long)a.top_k)
VULKAN_LAUNCH(moe_aux_loss, Dataflow_Moe_Aux_Loss_Args, 2 * a.experts, 1, 1, LOOP(a.experts, 0), "experts = %lld",
	      (long long)a.experts)
VULKAN_LAUNCH(moe_aux_loss_bwd, Dataflow_Moe_Aux_Loss_Bwd_Args, a.tokens * a.experts, a.tokens, MOE_GROUP,
	      LOOP(G, 2 * LOOP(a.experts, 0)), "experts = %lld, tokens = %lld", (long long)a.experts, (long long)a.tokens)
#define MOE_ASSIGNMENTS(a) ((a).tokens * (a).top_k)
VULKAN_LAUNCH(moe_permute_index, Dataflow_Moe_Permute_Index_Args, MOE_ASSIGNMENTS(a), 1, 1,
	      2 * LOOP(CDIV(a.experts, 256), LOOP(MOE_ASSIGNMENTS(a), 0)) + LOOP(a.experts, 0) +
		      LOOP(CDIV(a.experts + 1, 256), 0) + LOOP(CDIV(MOE_ASSIGNMENTS(a), 256), 0),
	      "tokens * top_k = %lld, experts = %lld", (long long)MOE_ASSIGNMENTS(a), (long long)a.experts)
VULKAN_LAUNCH(moe_combine, Dataflow_Moe_Combine_Args, MOE_ASSIGNMENTS(a) * a.hidden, a.tokens * a.hidden, GROUP,
	      LOOP(G, LOOP(a.top_k, 0)), "tokens * hidden = %lld", (long long)(a.tokens * a.hidden))
VULKAN_LAUNCH(moe_combine_bwd, Dataflow_Moe_Combine_Bwd_Args, MOE_ASSIGNMENTS(a) * a.hidden, MOE_ASSIGNMENTS(a),
	      MOE_GROUP, LOOP(G, LOOP(a.hidden, 0)), "hidden = %lld, tokens * top_k = %lld", (long long)a.hidden,
	      (long long)MOE_ASSIGNMENTS(a))

/* grouped matmuls: 16 x 16 tiles (MOE_TILE, the shaders' TILE), grid (columns, rows) for the
 * forward, (k_in, n_out, experts) for the weight gradient; their inner loop over the tile is
 * unrolled */
#define MOE_TILE 16
static Dataflow_Status moe_tiles(Dataflow_Handle *handle, const Op *op, int64_t x, int64_t y, int64_t z,
				 Dataflow_Launch_Config *config)
{
	uint32_t *max = vulkan_of(handle)->dev->props.limits.maxComputeWorkGroupCount;
	x = CDIV(x, MOE_TILE), y = CDIV(y, MOE_TILE);
	if (x > max[0] || y > max[1] || z > max[2])
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "%s (vulkan): %lld x %lld x %lld workgroups; the device allows %u x %u x %u",
					  op->skeleton.nickname, (long long)x, (long long)y, (long long)z, max[0], max[1],
					  max[2]);
	*config = (Dataflow_Launch_Config){{(uint32_t)x, (uint32_t)y, (uint32_t)z}, {0}, 0, 0};
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_vulkan_moe_grouped_matmul_launch(Dataflow_Handle *handle, const Op *op, void *op_state,
							  Dataflow_Launch_Config *config)
{
	(void)op_state;
	Dataflow_Moe_Grouped_Matmul_Args a = dataflow_moe_grouped_matmul_args(op->op_args);
	if (fits_32_bits(op, LARGER(a.rows, a.experts * a.n_out) * LARGER(a.n_out, a.k_in), "operands") != DATAFLOW_OK ||
	    loops_fit(handle, op, LOOP(a.experts, LOOP(CDIV(a.k_in, MOE_TILE), 0)), "experts = %lld, k_in = %lld",
		      (long long)a.experts, (long long)a.k_in) != DATAFLOW_OK)
		return dataflow_last_status();
	return moe_tiles(handle, op, a.n_out, a.rows, 1, config);
}

Dataflow_Status dataflow_vulkan_moe_grouped_matmul_bwd_w_launch(Dataflow_Handle *handle, const Op *op,
								void *op_state, Dataflow_Launch_Config *config)
{
	(void)op_state;
	Dataflow_Moe_Grouped_Matmul_Bwd_W_Args a = dataflow_moe_grouped_matmul_bwd_w_args(op->op_args);
	if (fits_32_bits(op, LARGER(a.rows, a.experts * a.n_out) * LARGER(a.n_out, a.k_in), "operands") != DATAFLOW_OK ||
	    loops_fit(handle, op, LOOP(a.experts + 1, 0) + LOOP(CDIV(a.rows, MOE_TILE), 0), "experts = %lld, rows = %lld",
		      (long long)a.experts, (long long)a.rows) != DATAFLOW_OK)
		return dataflow_last_status();
	return moe_tiles(handle, op, a.k_in, a.n_out, a.experts, config);
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
	/* the loop over K in steps of 16; matmul.comp unrolls the rest */
	if (loops_fit(handle, op, LOOP(CDIV(a.K, MATMUL_KT), 0), "K = %lld", (long long)a.K) != DATAFLOW_OK)
		return dataflow_last_status();
	const uint32_t groups[3] = {(uint32_t)gx, (uint32_t)gy, 1};
	return vulkan_dispatch(vulkan_of(handle), stream_id, op_state, op, groups);
}

/* ---- adamw_step and its lean-state forms: external ops, so that their per-step constants are
 * formed on the host ----
 * In double from the host's doubles (pow, sqrt) and rounded once to fp32, as the host kernel
 * does (backends/host/kernels/adamw_update.h); each kernel (shaders/adamw_step*.comp) gets some
 * of the op's arguments and then these (shaders/adamw.glsl's ADAMW_CONSTANTS), packed like a
 * skeleton's arguments. */

static Dataflow_Status adamw_init(const Op_Skeleton *skeleton, int param_arg, int grad_arg, Dataflow_Op_State *state)
{
	return variant_kernel(skeleton, 2, (const int[]){param_arg, grad_arg}, state);
}

Dataflow_Status dataflow_vulkan_adamw_step_init(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
						Dataflow_Op_State *state)
{
	(void)handle;
	return adamw_init(skeleton, DATAFLOW_ADAMW_STEP_ARG_PARAM, DATAFLOW_ADAMW_STEP_ARG_GRAD, state);
}

Dataflow_Status dataflow_vulkan_adamw_step_bf16_state_init(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
							   Dataflow_Op_State *state)
{
	(void)handle;
	return adamw_init(skeleton, DATAFLOW_ADAMW_STEP_BF16_STATE_ARG_PARAM, DATAFLOW_ADAMW_STEP_BF16_STATE_ARG_GRAD,
			  state);
}

Dataflow_Status dataflow_vulkan_adamw_step_8bit_init(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
						     Dataflow_Op_State *state)
{
	(void)handle;
	return adamw_init(skeleton, DATAFLOW_ADAMW_STEP_8BIT_ARG_PARAM, DATAFLOW_ADAMW_STEP_8BIT_ARG_GRAD, state);
}

enum { ADAMW_DECAY, ADAMW_W1, ADAMW_BETA2, ADAMW_C2, ADAMW_NEG_STEP_SIZE, ADAMW_BC2_SQRT, ADAMW_EPS, ADAMW_FLOATS };

typedef struct {
	double lr, beta1, beta2, eps, weight_decay;
	int64_t step;
} Adamw_Hyper;

/* Dispatches op's kernel with the op's arguments `keep` (in that order) and then the AdamW
 * constants, over n elements GROUP per workgroup, each invocation looping `loops` times. */
static Dataflow_Status adamw_dispatch(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state,
				      const int *keep, int num_keep, Adamw_Hyper a, int64_t n, double loops)
{
	if (fits_32_bits(op, n, "n") != DATAFLOW_OK)
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
	k.skeleton.num_args = num_keep + ADAMW_FLOATS + 1;
	for (int i = 0; i < num_keep; i++) {
		k.skeleton.arg_dtypes[i] = op->skeleton.arg_dtypes[keep[i]];
		k.op_args[i] = op->op_args[keep[i]];
	}
	for (int i = 0; i < ADAMW_FLOATS; i++) {
		k.skeleton.arg_dtypes[num_keep + i] = DATAFLOW_FP32_SCALAR;
		k.op_args[num_keep + i] = &c[i];
	}
	k.skeleton.arg_dtypes[num_keep + ADAMW_FLOATS] = DATAFLOW_INT32_SCALAR;
	k.op_args[num_keep + ADAMW_FLOATS] = &lerp_small;
	if (loops_fit(handle, op, loops, "n = %lld", (long long)n) != DATAFLOW_OK)
		return dataflow_last_status();
	Dataflow_Launch_Config config;
	groups_for(n, GROUP, &config);
	return vulkan_dispatch(vulkan_of(handle), stream_id, op_state, &k, config.grid);
}

#define ADAMW_HYPER(a) ((Adamw_Hyper){(a).lr, (a).beta1, (a).beta2, (a).eps, (a).weight_decay, (a).step})

Dataflow_Status dataflow_vulkan_adamw_step(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state)
{
	Dataflow_Adamw_Step_Args a = dataflow_adamw_step_args(op->op_args);
	static const int keep[] = {0, 1, 2, 3, 4, 5, 6}; /* n, param, grad, m, v, master, scale */
	return adamw_dispatch(handle, stream_id, op, op_state, keep, 7, ADAMW_HYPER(a), a.n,
			      LOOP(grid_passes(a.n, GROUP), 0));
}

Dataflow_Status dataflow_vulkan_adamw_step_bf16_state(Dataflow_Handle *handle, int stream_id, const Op *op,
						      void *op_state)
{
	Dataflow_Adamw_Step_Bf16_State_Args a = dataflow_adamw_step_bf16_state_args(op->op_args);
	/* n, param, grad, m, v, master, scale, step, seed */
	static const int keep[] = {0, 1, 2, 3, 4, 5, 6, DATAFLOW_ADAMW_STEP_BF16_STATE_ARG_STEP,
				   DATAFLOW_ADAMW_STEP_BF16_STATE_ARG_SEED};
	return adamw_dispatch(handle, stream_id, op, op_state, keep, 9, ADAMW_HYPER(a), a.n,
			      LOOP(grid_passes(a.n, GROUP), 0));
}

/* a workgroup per block of elements: two max trees and two binary searches per pass */
_Static_assert(GROUP == DATAFLOW_ADAMW_8BIT_BLOCK, "adamw_step_8bit.comp: an invocation per element of a block");
Dataflow_Status dataflow_vulkan_adamw_step_8bit(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state)
{
	Dataflow_Adamw_Step_8bit_Args a = dataflow_adamw_step_8bit_args(op->op_args);
	/* n, param, grad, m, v, m_absmax, v_absmax, qmap_m, qmap_v, master, scale */
	static const int keep[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
	return adamw_dispatch(handle, stream_id, op, op_state, keep, 11, ADAMW_HYPER(a), a.n,
			      LOOP(grid_passes(a.n, GROUP), 4 * LOOP(8, 0)));
}

/* ---- attention_bwd, attention_kv_bwd: external ops, so that their arguments fit 128 bytes of
 * push constants (the least a device may offer): their int64 scalars go as 32-bit words, which
 * the kernels (DATAFLOW_<OP>_PARAMS_NARROW, shaders/attention_bwd.glsl) read as uint: all are
 * below 2^32 (the catalogue bounds the token counts and num_seqs, the 32-bit index check the
 * heads and head_dim). One workgroup per (kv head, key) and per (query head, query). */

/* The loop passes of one invocation: a key's item walks, per query head of its group, the
 * blocks of queries (the dot products and the block's weights); a query's item the blocks of
 * keys (ATTN_ITEM_LOOPS, ATTN_FWD_BLOCK). */
static double attention_bwd_loops(int64_t q_tokens, int64_t k_tokens, int64_t group, int64_t num_seqs,
				  int64_t head_dim, int64_t items)
{
	double block = 2 * LOOP(head_dim, 0) + LOOP(CDIV(head_dim, ATTN_BLOCK), LOOP(ATTN_BLOCK, 0));
	double key = LOOP(group, LOOP(CDIV(q_tokens, ATTN_BLOCK), block));
	double query = LOOP(CDIV(k_tokens, ATTN_BLOCK), block);
	return LOOP(grid_passes(items, 1), ATTN_ITEM_LOOPS(num_seqs, head_dim) + LARGER(key, query));
}

/* op's int64 scalars as 32-bit words (their kernels' DATAFLOW_<OP>_PARAMS_NARROW) in k, backed
 * by narrow: each is below 2^32, as the callers' checks make sure. */
static void narrow_args(const Op *op, Op *k, int32_t *narrow)
{
	*k = *op;
	for (int i = 0; i < op->skeleton.num_args; i++)
		if (op->skeleton.arg_dtypes[i] == DATAFLOW_INT64_SCALAR) {
			narrow[i] = (int32_t)(uint32_t)*(const int64_t *)op->op_args[i];
			k->skeleton.arg_dtypes[i] = DATAFLOW_INT32_SCALAR;
			k->op_args[i] = &narrow[i];
		}
}

static Dataflow_Status dispatch_items(Dataflow_Handle *handle, int stream_id, void *op_state, const Op *k,
				      int64_t items)
{
	Dataflow_Launch_Config config;
	groups_for(items, 1, &config);
	return vulkan_dispatch(vulkan_of(handle), stream_id, op_state, k, config.grid);
}

/* Dispatches items workgroups of op with its int64 scalars as 32-bit words. */
static Dataflow_Status narrow_dispatch(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state,
				       int64_t items)
{
	Op k;
	int32_t narrow[DATAFLOW_MAX_OP_ARGS];
	narrow_args(op, &k, narrow);
	return dispatch_items(handle, stream_id, op_state, &k, items);
}

/* The causal word the kernels read, with the window (the last argument, dropped) folded in:
 * 0 full attention, else causal with keys back to that many (INT32_MAX: no window, as no
 * sequence reaches that far). */
static int32_t causal_word(int causal, int64_t window)
{
	return !causal ? 0 : window > 0 && window < INT32_MAX ? (int32_t)window : INT32_MAX;
}

/* narrow_dispatch with the window folded into the causal word (the arguments then fit 128 bytes) */
static Dataflow_Status attention_bwd_dispatch(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state,
					      int64_t items, int causal_arg, int window_arg)
{
	Op k;
	int32_t narrow[DATAFLOW_MAX_OP_ARGS];
	narrow_args(op, &k, narrow);
	int32_t band = causal_word(*(const int *)op->op_args[causal_arg] != 0, *(const int64_t *)op->op_args[window_arg]);
	k.skeleton.arg_dtypes[causal_arg] = DATAFLOW_INT32_SCALAR;
	k.op_args[causal_arg] = &band;
	k.skeleton.num_args = window_arg; /* the last argument */
	return dispatch_items(handle, stream_id, op_state, &k, items);
}

/* The external op OP (its arguments as `a`, of type Args): its init picks the variant's kernel
 * by q's dtype; q_tokens and k_tokens are its query and key token counts; SHAPE and what
 * follows describe the shape in the error of a loop bound it passes. */
#define VULKAN_ATTENTION_BWD(OP, Args, ARG_Q, ARG_CAUSAL, ARG_WINDOW, q_tokens, k_tokens, ...)                  \
	Dataflow_Status dataflow_vulkan_##OP##_init(Dataflow_Handle *handle, const Op_Skeleton *skeleton,     \
						    Dataflow_Op_State *state)                                 \
	{                                                                                                    \
		(void)handle;                                                                                \
		return variant_kernel(skeleton, 1, (const int[]){ARG_Q}, state);                             \
	}                                                                                                    \
	Dataflow_Status dataflow_vulkan_##OP(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state) \
	{                                                                                                    \
		Args a = dataflow_##OP##_args(op->op_args);                                                  \
		int64_t q_rows = (q_tokens) * a.num_q_heads, k_rows = (k_tokens) * a.num_kv_heads;           \
		if (fits_32_bits(op, LARGER(LARGER(q_rows, k_rows) * a.head_dim, q_rows + k_rows),           \
				 "(tokens * heads) * head_dim of q and of k, and their sum of rows") != DATAFLOW_OK) \
			return dataflow_last_status();                                                       \
		double loops = attention_bwd_loops((q_tokens), (k_tokens), a.num_q_heads / a.num_kv_heads,   \
						   a.num_seqs, a.head_dim, q_rows + k_rows);                  \
		if (loops_fit(handle, op, loops, __VA_ARGS__) != DATAFLOW_OK)                                \
			return dataflow_last_status();                                                       \
		return attention_bwd_dispatch(handle, stream_id, op, op_state, q_rows + k_rows, ARG_CAUSAL,  \
					      ARG_WINDOW);                                                   \
	}

VULKAN_ATTENTION_BWD(attention_bwd, Dataflow_Attention_Bwd_Args, DATAFLOW_ATTENTION_BWD_ARG_Q,
		     DATAFLOW_ATTENTION_BWD_ARG_CAUSAL, DATAFLOW_ATTENTION_BWD_ARG_WINDOW, a.total_tokens,
		     a.total_tokens, "total_tokens = %lld, head_dim = %lld, num_q_heads / num_kv_heads = %lld, num_seqs = %lld",
		     (long long)a.total_tokens, (long long)a.head_dim, (long long)(a.num_q_heads / a.num_kv_heads),
		     (long long)a.num_seqs)
VULKAN_ATTENTION_BWD(attention_kv_bwd, Dataflow_Attention_Kv_Bwd_Args, DATAFLOW_ATTENTION_KV_BWD_ARG_Q,
		     DATAFLOW_ATTENTION_KV_BWD_ARG_CAUSAL, DATAFLOW_ATTENTION_KV_BWD_ARG_WINDOW, a.total_q,
		     a.total_k,
		     "total_q = %lld, total_k = %lld, head_dim = %lld, num_q_heads / num_kv_heads = %lld, num_seqs = %lld",
		     (long long)a.total_q, (long long)a.total_k, (long long)a.head_dim,
		     (long long)(a.num_q_heads / a.num_kv_heads), (long long)a.num_seqs)

/* ---- paged_attention_partial: an external op for the same reason (148 bytes of arguments),
 * one workgroup per (split, query head, query token): the search for the sequence, the scan
 * of the split's pages, and attention's forward over the split's key blocks. ---- */
Dataflow_Status dataflow_vulkan_paged_attention_partial_init(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
							    Dataflow_Op_State *state)
{
	(void)handle;
	return variant_kernel(skeleton, 1, (const int[]){DATAFLOW_PAGED_ATTENTION_PARTIAL_ARG_Q}, state);
}

Dataflow_Status dataflow_vulkan_paged_attention_partial(Dataflow_Handle *handle, int stream_id, const Op *op,
						       void *op_state)
{
	Dataflow_Paged_Attention_Partial_Args a = dataflow_paged_attention_partial_args(op->op_args);
	int64_t splits = CDIV(a.max_pages * a.page_size, a.split_size), rows = a.total_q * a.num_q_heads;
	if (fits_32_bits(op, LARGER(a.num_pages * a.page_size * a.num_kv_heads * a.head_dim, splits * rows * (a.head_dim + 2)),
			 "the page pool's and the partials' elements") != DATAFLOW_OK)
		return dataflow_last_status();
	double item = ATTN_ITEM_LOOPS(a.batch, a.head_dim) + LOOP(CDIV(CDIV(a.split_size, a.page_size) + 1, ATTN_BLOCK), 0) +
		      LOOP(CDIV(a.split_size, ATTN_BLOCK), ATTN_FWD_BLOCK(a.head_dim)) + LOOP(CDIV(a.head_dim, ATTN_BLOCK), 0);
	if (loops_fit(handle, op, LOOP(grid_passes(splits * rows, 1), item),
		      "split_size = %lld, head_dim = %lld, batch = %lld, splits * total_q * num_q_heads = %lld",
		      (long long)a.split_size, (long long)a.head_dim, (long long)a.batch,
		      (long long)(splits * rows)) != DATAFLOW_OK)
		return dataflow_last_status();
	return narrow_dispatch(handle, stream_id, op, op_state, splits * rows);
}
