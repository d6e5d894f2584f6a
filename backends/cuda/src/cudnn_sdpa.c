#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn_sdpa.h"

/* The builder's state: the api, the handle, the plan collecting its descriptors, and the first
 * failure (later steps are skipped once one fails). */
typedef struct {
	const Cudnn_Api *api;
	cudnnHandle_t handle;
	Cudnn_Sdpa_Plan *plan;
	Dataflow_Status st;
} Builder;

/* (cudnn_sdpa.h) */
int cudnn_status_is_refusal(cudnnStatus_t s)
{
	const int family = s / 1000 * 1000;
	return family == CUDNN_STATUS_BAD_PARAM || family == CUDNN_STATUS_NOT_SUPPORTED ||
	       s == CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED || s == CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH ||
	       s == CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED;
}

static Dataflow_Status fail(Builder *b, cudnnStatus_t s, const char *what)
{
	char last[512] = "";
	if (b->api->cudnnGetLastErrorString)
		b->api->cudnnGetLastErrorString(last, sizeof(last));
	b->st = dataflow_set_error(cudnn_status_is_refusal(s) ? DATAFLOW_ERR_UNSUPPORTED : DATAFLOW_ERR_BACKEND,
				   "cudnn sdpa: %s: %s (%d)%s%s", what, b->api->cudnnGetErrorString(s), s,
				   last[0] ? ": " : "", last);
	return b->st;
}

static cudnnBackendDescriptor_t create(Builder *b, int type)
{
	cudnnBackendDescriptor_t d = NULL;
	if (b->st != DATAFLOW_OK)
		return NULL;
	if (b->plan->num_descriptors == CUDNN_SDPA_MAX_DESCRIPTORS) {
		b->st = dataflow_set_error(DATAFLOW_ERR_INTERNAL, "cudnn sdpa: more than %d descriptors",
					   CUDNN_SDPA_MAX_DESCRIPTORS);
		return NULL;
	}
	cudnnStatus_t s = b->api->cudnnBackendCreateDescriptor(type, &d);
	if (s != CUDNN_STATUS_SUCCESS) {
		fail(b, s, "cudnnBackendCreateDescriptor");
		return NULL;
	}
	b->plan->descriptors[b->plan->num_descriptors++] = d;
	return d;
}

static void set(Builder *b, cudnnBackendDescriptor_t d, int name, int type, int64_t count, const void *values)
{
	if (b->st != DATAFLOW_OK)
		return;
	cudnnStatus_t s = b->api->cudnnBackendSetAttribute(d, name, type, count, values);
	if (s != CUDNN_STATUS_SUCCESS) {
		char what[64];
		snprintf(what, sizeof(what), "set attribute %d", name);
		fail(b, s, what);
	}
}

static void link(Builder *b, cudnnBackendDescriptor_t d, int name, cudnnBackendDescriptor_t value)
{
	set(b, d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
}

static void finalize(Builder *b, cudnnBackendDescriptor_t d, const char *what)
{
	if (b->st != DATAFLOW_OK)
		return;
	cudnnStatus_t s = b->api->cudnnBackendFinalize(d);
	if (s != CUDNN_STATUS_SUCCESS)
		fail(b, s, what);
}

/* A 4-d tensor; virtual ones live only inside the fused kernel, by-value ones are host
 * scalars passed in the variant pack. */
static cudnnBackendDescriptor_t tensor(Builder *b, int64_t uid, int dtype, const int64_t dims[4],
				       const int64_t strides[4], bool is_virtual, bool by_value)
{
	cudnnBackendDescriptor_t t = create(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
	int64_t align = by_value ? 4 : 16;
	set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
	set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype);
	set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
	set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
	set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
	if (is_virtual)
		set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
	if (by_value)
		set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
	finalize(b, t, "tensor");
	return t;
}

/* [T][H][d] as (1, H, T, d) */
static cudnnBackendDescriptor_t rows(Builder *b, int64_t uid, int64_t heads)
{
	const Cudnn_Sdpa_Shape *s = &b->plan->shape;
	int64_t dims[4] = {1, heads, s->tokens, s->head_dim};
	int64_t strides[4] = {s->tokens * heads * s->head_dim, s->head_dim, heads * s->head_dim, 1};
	return tensor(b, uid, s->dtype, dims, strides, false, false);
}

static cudnnBackendDescriptor_t scalar(Builder *b, int64_t uid, int dtype)
{
	static const int64_t ones[4] = {1, 1, 1, 1};
	return tensor(b, uid, dtype, ones, ones, false, true);
}

static cudnnBackendDescriptor_t op_graph(Builder *b, cudnnBackendDescriptor_t op)
{
	cudnnBackendDescriptor_t g = create(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
	set(b, g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &b->handle);
	link(b, g, CUDNN_ATTR_OPERATIONGRAPH_OPS, op);
	finalize(b, g, "operation graph");
	return g;
}

/* The causal score modifier: scores (virtual, fp32, (1, Hq, T, T)) -> masked, keeping column
 * (key) j where row (query) i + 0 >= j and writing -inf elsewhere. */
static cudnnBackendDescriptor_t causal_subgraph(Builder *b)
{
	const Cudnn_Sdpa_Shape *s = &b->plan->shape;
	int64_t t = s->tokens, dims[4] = {1, s->q_heads, t, t}, strides[4] = {s->q_heads * t * t, t * t, t, 1};
	cudnnBackendDescriptor_t scores = tensor(b, CUDNN_SDPA_SCORES, CUDNN_DATA_FLOAT, dims, strides, true, false);
	cudnnBackendDescriptor_t masked = tensor(b, CUDNN_SDPA_MASKED, CUDNN_DATA_FLOAT, dims, strides, true, false);
	cudnnBackendDescriptor_t bound = scalar(b, CUDNN_SDPA_BOUND, CUDNN_DATA_INT32);
	cudnnBackendDescriptor_t fill = scalar(b, CUDNN_SDPA_FILL, CUDNN_DATA_FLOAT);
	cudnnBackendDescriptor_t mask = create(b, CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR);
	int mode = CUDNN_POINTWISE_CMP_GE;
	link(b, mask, CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_XDESC, scores);
	link(b, mask, CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_SHIFT_RIGHT_BOUND_DESC, bound);
	link(b, mask, CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_BDESC, fill);
	link(b, mask, CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_YDESC, masked);
	set(b, mask, CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_COMPARISON_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
	finalize(b, mask, "diagonal band mask");
	return op_graph(b, mask);
}

static cudnnBackendDescriptor_t sdpa_op(Builder *b)
{
	const Cudnn_Sdpa_Shape *s = &b->plan->shape;
	const bool bwd = s->backward;
	int64_t stats_dims[4] = {1, s->q_heads, s->tokens, 1}, stats_strides[4] = {s->q_heads * s->tokens, s->tokens, 1, 1};
	cudnnBackendDescriptor_t q = rows(b, CUDNN_SDPA_Q, s->q_heads), k = rows(b, CUDNN_SDPA_K, s->kv_heads);
	cudnnBackendDescriptor_t v = rows(b, CUDNN_SDPA_V, s->kv_heads), o = rows(b, CUDNN_SDPA_O, s->q_heads);
	cudnnBackendDescriptor_t stats = tensor(b, CUDNN_SDPA_STATS, CUDNN_DATA_FLOAT, stats_dims, stats_strides, false, false);
	cudnnBackendDescriptor_t scale = scalar(b, CUDNN_SDPA_SCALE, CUDNN_DATA_FLOAT);
	cudnnBackendDescriptor_t sub = s->causal ? causal_subgraph(b) : NULL;
	cudnnBackendDescriptor_t op = create(b, bwd ? CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR
						    : CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
	link(b, op, bwd ? CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC : CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, q);
	link(b, op, bwd ? CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC : CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, k);
	link(b, op, bwd ? CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC : CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, v);
	link(b, op, bwd ? CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC : CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, o);
	link(b, op, bwd ? CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC : CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, stats);
	link(b, op, bwd ? CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC : CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, scale);
	if (bwd) {
		link(b, op, CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, rows(b, CUDNN_SDPA_DO, s->q_heads));
		link(b, op, CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, rows(b, CUDNN_SDPA_DQ, s->q_heads));
		link(b, op, CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, rows(b, CUDNN_SDPA_DK, s->kv_heads));
		link(b, op, CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, rows(b, CUDNN_SDPA_DV, s->kv_heads));
	}
	if (sub) {
		int64_t in = CUDNN_SDPA_SCORES, out = CUDNN_SDPA_MASKED;
		link(b, op, bwd ? CUDNN_ATTR_OPERATION_SDPA_BWD_SUBGRAPH : CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH, sub);
		set(b, op, bwd ? CUDNN_ATTR_OPERATION_SDPA_BWD_SUBGRAPH_INPUT_UID : CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH_INPUT_UID,
		    CUDNN_TYPE_INT64, 1, &in);
		set(b, op, bwd ? CUDNN_ATTR_OPERATION_SDPA_BWD_SUBGRAPH_OUTPUT_UID : CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH_OUTPUT_UID,
		    CUDNN_TYPE_INT64, 1, &out);
	}
	finalize(b, op, bwd ? "sdpa backward operation" : "sdpa forward operation");
	return op;
}

/* The first engine configuration of heuristics mode `mode` whose plan finalizes; 1 if found. */
static int plan_from_heuristics(Builder *b, cudnnBackendDescriptor_t graph, int mode)
{
	cudnnBackendDescriptor_t heur = create(b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
	link(b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
	set(b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
	finalize(b, heur, "engine heuristics");
	if (b->st != DATAFLOW_OK)
		return 0;
	int64_t count = 0;
	cudnnStatus_t s = b->api->cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
							     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
	if (s != CUDNN_STATUS_SUCCESS) {
		fail(b, s, "engine heuristics results");
		return 0;
	}
	if (count > 8)
		count = 8;
	cudnnBackendDescriptor_t configs[8];
	for (int64_t i = 0; i < count; i++)
		configs[i] = create(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
	if (b->st != DATAFLOW_OK)
		return 0;
	int64_t returned = 0;
	s = b->api->cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
					     &returned, configs);
	if (s != CUDNN_STATUS_SUCCESS) {
		fail(b, s, "engine heuristics results");
		return 0;
	}
	for (int64_t i = 0; i < returned; i++) {
		cudnnBackendDescriptor_t plan = create(b, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
		set(b, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &b->handle);
		link(b, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i]);
		if (b->st != DATAFLOW_OK)
			return 0;
		if (b->api->cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS) { /* else: the next config */
			b->plan->plan = plan;
			return 1;
		}
	}
	return 0;
}

Dataflow_Status cudnn_sdpa_build(const Cudnn_Api *api, cudnnHandle_t handle, const Cudnn_Sdpa_Shape *shape,
				 Cudnn_Sdpa_Plan *plan)
{
	memset(plan, 0, sizeof(*plan));
	plan->shape = *shape;
	Builder b = {api, handle, plan, DATAFLOW_OK};
	cudnnBackendDescriptor_t graph = op_graph(&b, sdpa_op(&b));
	if (b.st == DATAFLOW_OK && !plan_from_heuristics(&b, graph, CUDNN_HEUR_MODE_A) && b.st == DATAFLOW_OK &&
	    !plan_from_heuristics(&b, graph, CUDNN_HEUR_MODE_FALLBACK) && b.st == DATAFLOW_OK)
		b.st = dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "cudnn sdpa: no engine takes %s T=%lld Hq=%lld Hkv=%lld d=%lld%s",
					  shape->backward ? "backward" : "forward", (long long)shape->tokens,
					  (long long)shape->q_heads, (long long)shape->kv_heads, (long long)shape->head_dim,
					  shape->causal ? " causal" : "");
	if (b.st == DATAFLOW_OK) {
		int64_t n = 0;
		cudnnStatus_t s = api->cudnnBackendGetAttribute(plan->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
								CUDNN_TYPE_INT64, 1, &n, &plan->workspace_bytes);
		if (s != CUDNN_STATUS_SUCCESS)
			fail(&b, s, "plan workspace size");
	}
	if (b.st != DATAFLOW_OK)
		cudnn_sdpa_release(api, plan);
	return b.st;
}

void cudnn_sdpa_release(const Cudnn_Api *api, Cudnn_Sdpa_Plan *plan)
{
	for (int i = plan->num_descriptors; i-- > 0;)
		api->cudnnBackendDestroyDescriptor(plan->descriptors[i]);
	plan->num_descriptors = 0;
	plan->plan = NULL;
}

Dataflow_Status cudnn_sdpa_execute(const Cudnn_Api *api, cudnnHandle_t handle, const Cudnn_Sdpa_Plan *plan,
				   const Cudnn_Sdpa_Args *a)
{
	const float fill = -INFINITY;
	const int32_t bound = 0;
	int64_t uids[16];
	void *ptrs[16];
	int n = 0;
#define BIND(UID, PTR) (uids[n] = (UID), ptrs[n++] = (void *)(PTR))
	BIND(CUDNN_SDPA_Q, a->q);
	BIND(CUDNN_SDPA_K, a->k);
	BIND(CUDNN_SDPA_V, a->v);
	BIND(CUDNN_SDPA_O, a->o);
	BIND(CUDNN_SDPA_STATS, a->stats);
	BIND(CUDNN_SDPA_SCALE, &a->scale);
	if (plan->shape.backward) {
		BIND(CUDNN_SDPA_DO, a->dout);
		BIND(CUDNN_SDPA_DQ, a->dq);
		BIND(CUDNN_SDPA_DK, a->dk);
		BIND(CUDNN_SDPA_DV, a->dv);
	}
	if (plan->shape.causal) {
		BIND(CUDNN_SDPA_BOUND, &bound);
		BIND(CUDNN_SDPA_FILL, &fill);
	}
#undef BIND
	Cudnn_Sdpa_Plan scratch = {.shape = plan->shape};
	Builder b = {api, handle, &scratch, DATAFLOW_OK};
	cudnnBackendDescriptor_t pack = create(&b, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
	set(&b, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
	set(&b, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
	set(&b, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &a->workspace);
	finalize(&b, pack, "variant pack");
	if (b.st == DATAFLOW_OK) {
		cudnnStatus_t s = api->cudnnBackendExecute(handle, plan->plan, pack);
		if (s != CUDNN_STATUS_SUCCESS)
			fail(&b, s, "cudnnBackendExecute");
	}
	cudnn_sdpa_release(api, &scratch);
	return b.st;
}
