/* moe_grouped_matmul and moe_grouped_matmul_bwd_w as host external ops: one matmul per expert
 * over its rows, on the host matmul's engines (matmul.c: oneDNN, else the blocked fallback),
 * with the expert offsets read when the op runs, in stream order (they are device data the
 * router wrote; nothing waits on the host):
 *   forward / d_x:  out[r] = x[r] @ op(W[e])                     for o[e] <= r < o[e + 1]
 *   d_w:            d_w[e] = d_w[e] + dy[o[e]:o[e+1]]^T @ x[o[e]:o[e+1]]
 * The row count of each expert changes with the routing, so the matmuls ask for oneDNN's
 * runtime dimensions (Matmul_Args.runtime_mk): one primitive per weight shape. The state is
 * the matmul op's (dataflow_host_matmul_init, which reads DATAFLOW_HOST_MATMUL). */
#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "matmul.h"

/* Expert e's rows [*begin, *end): the offsets clamped into [0, rows] and made non-decreasing
 * (they are untrusted device data). */
static void expert_rows(const int32_t *offsets, int64_t e, int64_t rows, int64_t *begin, int64_t *end)
{
	int64_t lo = 0;
	for (int64_t i = 0; i <= e; i++) { /* the running maximum up to e */
		int64_t o = offsets[i] < 0 ? 0 : offsets[i] > rows ? rows : offsets[i];
		lo = o > lo ? o : lo;
	}
	int64_t hi = offsets[e + 1] < 0 ? 0 : offsets[e + 1] > rows ? rows : offsets[e + 1];
	*begin = lo;
	*end = hi > lo ? hi : lo;
}

/* The matmul of expert e over its rows [r0, r1) (threads and runtime dimensions are set by
 * each_expert). */
typedef Matmul_Args (*Expert_Matmul)(const Op *op, int64_t e, int64_t r0, int64_t r1);

/* Runs matmul_of for every expert with rows, in expert order on the stream. */
static Dataflow_Status each_expert(Dataflow_Handle *handle, int stream_id, void *op_state, const Op *op,
				   const int32_t *offsets, int64_t experts, int64_t rows, Expert_Matmul matmul_of)
{
	int threads = dataflow_host_compute_threads(handle);
	for (int64_t e = 0; e < experts; e++) {
		int64_t r0, r1;
		expert_rows(offsets, e, rows, &r0, &r1);
		if (r0 == r1)
			continue;
		Matmul_Args m = matmul_of(op, e, r0, r1);
		m.num_threads = threads;
		m.runtime_mk = 1;
		DATAFLOW_TRY(matmul_run(op_state, stream_id, &m));
	}
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_host_moe_grouped_matmul_init(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
						      Dataflow_Op_State *state)
{
	return dataflow_host_matmul_init(handle, skeleton, state);
}

static Matmul_Args forward_matmul(const Op *op, int64_t e, int64_t r0, int64_t r1)
{
	Dataflow_Moe_Grouped_Matmul_Args a = dataflow_moe_grouped_matmul_args(op->op_args);
	DataflowDatatype dt = op->skeleton.arg_dtypes[DATAFLOW_MOE_GROUPED_MATMUL_ARG_X];
	size_t size = dataflow_datatype_size(dt);
	return (Matmul_Args){
		.in_dtype = dt,
		.out_dtype = dt,
		.A = (const char *)a.x + (size_t)(r0 * a.k_in) * size,
		.B = (const char *)a.w + (size_t)(e * a.n_out * a.k_in) * size,
		.D = (char *)a.out + (size_t)(r0 * a.n_out) * size,
		.M = r1 - r0,
		.N = a.n_out,
		.K = a.k_in,
		.trans_b = a.trans_w,
		.alpha = 1.0f,
	};
}

Dataflow_Status dataflow_host_moe_grouped_matmul(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state)
{
	Dataflow_Moe_Grouped_Matmul_Args a = dataflow_moe_grouped_matmul_args(op->op_args);
	return each_expert(handle, stream_id, op_state, op, a.expert_offsets, a.experts, a.rows, forward_matmul);
}

Dataflow_Status dataflow_host_moe_grouped_matmul_bwd_w_init(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
							    Dataflow_Op_State *state)
{
	return dataflow_host_matmul_init(handle, skeleton, state);
}

static Matmul_Args bwd_w_matmul(const Op *op, int64_t e, int64_t r0, int64_t r1)
{
	Dataflow_Moe_Grouped_Matmul_Bwd_W_Args a = dataflow_moe_grouped_matmul_bwd_w_args(op->op_args);
	DataflowDatatype dt = op->skeleton.arg_dtypes[DATAFLOW_MOE_GROUPED_MATMUL_BWD_W_ARG_X];
	DataflowDatatype gdt = op->skeleton.arg_dtypes[DATAFLOW_MOE_GROUPED_MATMUL_BWD_W_ARG_D_W];
	size_t size = dataflow_datatype_size(dt);
	void *dw = (char *)a.d_w + (size_t)(e * a.n_out * a.k_in) * dataflow_datatype_size(gdt);
	return (Matmul_Args){
		.in_dtype = dt,
		.out_dtype = gdt,
		.A = (const char *)a.dy + (size_t)(r0 * a.n_out) * size,
		.B = (const char *)a.x + (size_t)(r0 * a.k_in) * size,
		.C = dw,
		.D = dw,
		.M = a.n_out,
		.N = a.k_in,
		.K = r1 - r0,
		.trans_a = 1,
		.alpha = 1.0f,
		.beta = 1.0f,
	};
}

Dataflow_Status dataflow_host_moe_grouped_matmul_bwd_w(Dataflow_Handle *handle, int stream_id, const Op *op,
						       void *op_state)
{
	Dataflow_Moe_Grouped_Matmul_Bwd_W_Args a = dataflow_moe_grouped_matmul_bwd_w_args(op->op_args);
	return each_expert(handle, stream_id, op_state, op, a.expert_offsets, a.experts, a.rows, bwd_w_matmul);
}
