/* The cuDNN SDPA graph builder (backends/cuda/src/cudnn_sdpa.c) against a mock of cuDNN's
 * backend API: the descriptors it makes, their attributes (tensor shapes, strides, types, uids,
 * links), the order of finalization, the heuristics walk, the variant pack and the cleanup.
 * The mock enforces what cuDNN enforces on these calls (attributes set only before finalize,
 * only finalized descriptors linked, required attributes present). No GPU, no cuDNN. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn_sdpa.h"

#include "c_test.h"

/* ---- the mock ---- */

#define MAX_ATTRS 24
typedef struct {
	int name, type;
	int64_t count;
	int64_t ints[16];         /* INT64, DATA_TYPE, HEUR_MODE, POINTWISE_MODE, BOOLEAN values */
	void *ptrs[16];           /* BACKEND_DESCRIPTOR, HANDLE, VOID_PTR values */
} Attr;

typedef struct Desc {
	int type, finalized, destroyed;
	Attr attrs[MAX_ATTRS];
	int num_attrs;
} Desc;

static Desc *descs[256];
static int num_descs, live, refuse_first_plans, offered_configs = 2, misuse;
static cudnnStatus_t op_status, execute_status; /* what finalizing the SDPA op and executing return */
static Desc *executed_plan, *executed_pack;

static cudnnStatus_t mock_create(int type, cudnnBackendDescriptor_t *d)
{
	Desc *x = calloc(1, sizeof(Desc));
	x->type = type;
	descs[num_descs++] = x;
	live++;
	*d = x;
	return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t mock_destroy(cudnnBackendDescriptor_t d)
{
	Desc *x = d;
	if (x->destroyed)
		misuse++;
	x->destroyed = 1;
	live--;
	return CUDNN_STATUS_SUCCESS;
}

static const Attr *attr(const Desc *x, int name)
{
	for (int i = 0; i < x->num_attrs; i++)
		if (x->attrs[i].name == name)
			return &x->attrs[i];
	return NULL;
}

static cudnnStatus_t mock_set(cudnnBackendDescriptor_t d, int name, int type, int64_t count, const void *values)
{
	Desc *x = d;
	if (x->finalized || x->destroyed || count > 16 || x->num_attrs == MAX_ATTRS) {
		misuse++;
		return 2000; /* CUDNN_STATUS_BAD_PARAM */
	}
	Attr *a = &x->attrs[x->num_attrs++];
	a->name = name, a->type = type, a->count = count;
	for (int64_t i = 0; i < count; i++) {
		switch (type) {
		case CUDNN_TYPE_INT64:
			a->ints[i] = ((const int64_t *)values)[i];
			break;
		case CUDNN_TYPE_DATA_TYPE:
		case CUDNN_TYPE_HEUR_MODE:
		case CUDNN_TYPE_POINTWISE_MODE:
			a->ints[i] = ((const int *)values)[i];
			break;
		case CUDNN_TYPE_BOOLEAN:
			a->ints[i] = ((const unsigned char *)values)[i];
			break;
		default: /* descriptors, handles, pointers */
			a->ptrs[i] = ((void *const *)values)[i];
			if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR && !((Desc *)a->ptrs[i])->finalized &&
			    ((Desc *)a->ptrs[i])->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
				misuse++; /* cuDNN takes only finalized descriptors */
		}
	}
	return CUDNN_STATUS_SUCCESS;
}

static int plans_finalized;

static cudnnStatus_t mock_finalize(cudnnBackendDescriptor_t d)
{
	Desc *x = d;
	if (x->finalized)
		misuse++;
	if (x->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR &&
	    !(attr(x, CUDNN_ATTR_TENSOR_UNIQUE_ID) && attr(x, CUDNN_ATTR_TENSOR_DATA_TYPE) &&
	      attr(x, CUDNN_ATTR_TENSOR_DIMENSIONS) && attr(x, CUDNN_ATTR_TENSOR_STRIDES) &&
	      attr(x, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT)))
		return 2000;
	if ((x->type == CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR ||
	     x->type == CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR) && op_status != CUDNN_STATUS_SUCCESS)
		return op_status;
	if (x->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) {
		if (!attr(x, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG))
			return 2000;
		if (plans_finalized++ < refuse_first_plans)
			return CUDNN_STATUS_NOT_SUPPORTED;
	}
	x->finalized = 1;
	return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t mock_get(cudnnBackendDescriptor_t d, int name, int type, int64_t requested, int64_t *count,
			      void *values)
{
	Desc *x = d;
	if (!x->finalized)
		misuse++;
	if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS && type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
		*count = requested == 0 ? offered_configs : requested < offered_configs ? requested : offered_configs;
		return CUDNN_STATUS_SUCCESS; /* the configs handed in stay as they are (opaque to the builder) */
	}
	if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE && type == CUDNN_TYPE_INT64 && requested == 1) {
		*count = 1;
		*(int64_t *)values = 1234;
		return CUDNN_STATUS_SUCCESS;
	}
	misuse++;
	return 2000;
}

static cudnnStatus_t mock_execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack)
{
	(void)h;
	executed_plan = plan;
	executed_pack = pack;
	if (!((Desc *)plan)->finalized || !((Desc *)pack)->finalized)
		misuse++;
	return execute_status;
}

static const char *mock_error_string(cudnnStatus_t s)
{
	static char text[32];
	snprintf(text, sizeof(text), "mock status %d", s);
	return text;
}

static void mock_last_error(char *m, size_t n)
{
	snprintf(m, n, "mock");
}

/* the backend API's entries the graph builder calls, each a mock */
static const Cudnn_Api api = {
	.cudnnGetErrorString = mock_error_string, .cudnnGetLastErrorString = mock_last_error,
	.cudnnBackendCreateDescriptor = mock_create, .cudnnBackendDestroyDescriptor = mock_destroy,
	.cudnnBackendFinalize = mock_finalize, .cudnnBackendSetAttribute = mock_set,
	.cudnnBackendGetAttribute = mock_get, .cudnnBackendExecute = mock_execute,
};

static void reset(void)
{
	for (int i = 0; i < num_descs; i++)
		free(descs[i]);
	num_descs = live = misuse = plans_finalized = refuse_first_plans = 0;
	op_status = execute_status = CUDNN_STATUS_SUCCESS;
	offered_configs = 2;
	executed_plan = executed_pack = NULL;
}

/* ---- queries over what the builder made ---- */

static Desc *find(int type, int nth)
{
	for (int i = 0; i < num_descs; i++)
		if (descs[i]->type == type && nth-- == 0)
			return descs[i];
	return NULL;
}

static int count_type(int type)
{
	int n = 0;
	for (int i = 0; i < num_descs; i++)
		n += descs[i]->type == type;
	return n;
}

static Desc *linked(const Desc *x, int name)
{
	const Attr *a = attr(x, name);
	return a && a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR && a->count == 1 ? a->ptrs[0] : NULL;
}

static int64_t int_attr(const Desc *x, int name)
{
	const Attr *a = attr(x, name);
	return a ? a->ints[0] : -999;
}

static int ints_equal(const Desc *x, int name, const int64_t *want, int n)
{
	const Attr *a = attr(x, name);
	if (!a || a->count != n)
		return 0;
	for (int i = 0; i < n; i++)
		if (a->ints[i] != want[i])
			return 0;
	return 1;
}

/* tensor t is [T][H][d] as (1, H, T, d) of dtype with uid */
static int is_rows(const Desc *t, int64_t uid, int dtype, int64_t T, int64_t H, int64_t d)
{
	int64_t dims[4] = {1, H, T, d}, strides[4] = {T * H * d, d, H * d, 1};
	return t && t->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR && t->finalized &&
	       int_attr(t, CUDNN_ATTR_TENSOR_UNIQUE_ID) == uid && int_attr(t, CUDNN_ATTR_TENSOR_DATA_TYPE) == dtype &&
	       ints_equal(t, CUDNN_ATTR_TENSOR_DIMENSIONS, dims, 4) &&
	       ints_equal(t, CUDNN_ATTR_TENSOR_STRIDES, strides, 4) &&
	       int_attr(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT) == 16 && !attr(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL);
}

static int is_scalar(const Desc *t, int64_t uid, int dtype)
{
	int64_t ones[4] = {1, 1, 1, 1};
	return t && t->finalized && int_attr(t, CUDNN_ATTR_TENSOR_UNIQUE_ID) == uid &&
	       int_attr(t, CUDNN_ATTR_TENSOR_DATA_TYPE) == dtype && int_attr(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE) == 1 &&
	       ints_equal(t, CUDNN_ATTR_TENSOR_DIMENSIONS, ones, 4);
}

/* ---- tests ---- */

static const int64_t T = 300, HQ = 8, HKV = 2, D = 64;
static int handle_token;

static void test_forward(void)
{
	reset();
	refuse_first_plans = 1; /* the first config's plan fails: the builder takes the next */
	Cudnn_Sdpa_Shape s = {CUDNN_DATA_BFLOAT16, T, HQ, HKV, D, 0, 0};
	Cudnn_Sdpa_Plan plan;
	EXPECT_TRUE(cudnn_sdpa_build(&api, (cudnnHandle_t)&handle_token, &s, &plan) == DATAFLOW_OK);
	EXPECT_TRUE(misuse == 0);
	Desc *op = find(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, 0);
	EXPECT_TRUE(op && op->finalized && count_type(CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR) == 0);
	EXPECT_TRUE(is_rows(linked(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC), CUDNN_SDPA_Q, CUDNN_DATA_BFLOAT16, T, HQ, D));
	EXPECT_TRUE(is_rows(linked(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC), CUDNN_SDPA_K, CUDNN_DATA_BFLOAT16, T, HKV, D));
	EXPECT_TRUE(is_rows(linked(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC), CUDNN_SDPA_V, CUDNN_DATA_BFLOAT16, T, HKV, D));
	EXPECT_TRUE(is_rows(linked(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC), CUDNN_SDPA_O, CUDNN_DATA_BFLOAT16, T, HQ, D));
	Desc *stats = linked(op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC);
	int64_t sd[4] = {1, HQ, T, 1}, ss[4] = {HQ * T, T, 1, 1}; /* the ops' lse: [Hq][T] */
	EXPECT_TRUE(stats && int_attr(stats, CUDNN_ATTR_TENSOR_DATA_TYPE) == CUDNN_DATA_FLOAT &&
	      ints_equal(stats, CUDNN_ATTR_TENSOR_DIMENSIONS, sd, 4) && ints_equal(stats, CUDNN_ATTR_TENSOR_STRIDES, ss, 4) &&
	      int_attr(stats, CUDNN_ATTR_TENSOR_UNIQUE_ID) == CUDNN_SDPA_STATS);
	EXPECT_TRUE(is_scalar(linked(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC), CUDNN_SDPA_SCALE, CUDNN_DATA_FLOAT));
	EXPECT_TRUE(!attr(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH));
	EXPECT_TRUE(count_type(CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR) == 0);
	/* the graph holds the op and the handle; heuristics mode A on it */
	Desc *graph = find(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, 0);
	EXPECT_TRUE(graph && graph->finalized && linked(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS) == op);
	EXPECT_TRUE(attr(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE)->ptrs[0] == (void *)&handle_token);
	Desc *heur = find(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, 0);
	EXPECT_TRUE(heur && linked(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH) == graph &&
	      int_attr(heur, CUDNN_ATTR_ENGINEHEUR_MODE) == CUDNN_HEUR_MODE_A);
	/* two configs, two plans tried: the second is the plan */
	EXPECT_TRUE(count_type(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) == 2 &&
	      count_type(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) == 2);
	Desc *p1 = find(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, 1);
	EXPECT_TRUE(plan.plan == p1 && p1->finalized &&
	      linked(p1, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG) == find(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, 1));
	EXPECT_TRUE(plan.workspace_bytes == 1234);

	/* a run: the variant pack binds every tensor by uid, the scale by value */
	char q, k, v, o, st, ws;
	Cudnn_Sdpa_Args a = {.q = &q, .k = &k, .v = &v, .o = &o, .stats = &st, .scale = 0.125f, .workspace = &ws};
	EXPECT_TRUE(cudnn_sdpa_execute(&api, (cudnnHandle_t)&handle_token, &plan, &a) == DATAFLOW_OK);
	EXPECT_TRUE(executed_plan == p1 && executed_pack && executed_pack->destroyed); /* the pack is per run */
	const Attr *uids = attr(executed_pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
	const Attr *ptrs = attr(executed_pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
	EXPECT_TRUE(uids && ptrs && uids->count == 6 && ptrs->count == 6);
	void *want[7] = {NULL, &q, &k, &v, &o, &st, NULL};
	for (int i = 0; uids && ptrs && i < uids->count; i++) {
		if (uids->ints[i] == CUDNN_SDPA_SCALE)
			EXPECT_TRUE(*(const float *)ptrs->ptrs[i] == 0.125f);
		else
			EXPECT_TRUE(uids->ints[i] >= 1 && uids->ints[i] <= 5 && ptrs->ptrs[i] == want[uids->ints[i]]);
	}
	EXPECT_TRUE(attr(executed_pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE)->ptrs[0] == (void *)&ws);
	cudnn_sdpa_release(&api, &plan);
	EXPECT_TRUE(live == 0 && misuse == 0);
}

static void test_causal_backward(void)
{
	reset();
	Cudnn_Sdpa_Shape s = {CUDNN_DATA_HALF, T, HQ, HKV, D, 1, 1};
	Cudnn_Sdpa_Plan plan;
	EXPECT_TRUE(cudnn_sdpa_build(&api, (cudnnHandle_t)&handle_token, &s, &plan) == DATAFLOW_OK);
	EXPECT_TRUE(misuse == 0 && count_type(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR) == 0);
	Desc *op = find(CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR, 0);
	EXPECT_TRUE(op && op->finalized);
	EXPECT_TRUE(is_rows(linked(op, CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC), CUDNN_SDPA_Q, CUDNN_DATA_HALF, T, HQ, D));
	EXPECT_TRUE(is_rows(linked(op, CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC), CUDNN_SDPA_O, CUDNN_DATA_HALF, T, HQ, D));
	EXPECT_TRUE(is_rows(linked(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC), CUDNN_SDPA_DO, CUDNN_DATA_HALF, T, HQ, D));
	EXPECT_TRUE(is_rows(linked(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC), CUDNN_SDPA_DQ, CUDNN_DATA_HALF, T, HQ, D));
	EXPECT_TRUE(is_rows(linked(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC), CUDNN_SDPA_DK, CUDNN_DATA_HALF, T, HKV, D));
	EXPECT_TRUE(is_rows(linked(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC), CUDNN_SDPA_DV, CUDNN_DATA_HALF, T, HKV, D));
	EXPECT_TRUE(linked(op, CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC) &&
	      int_attr(linked(op, CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC), CUDNN_ATTR_TENSOR_UNIQUE_ID) == CUDNN_SDPA_STATS);
	/* causal: a subgraph of one diagonal band mask keeping key <= query, -inf elsewhere */
	Desc *sub = linked(op, CUDNN_ATTR_OPERATION_SDPA_BWD_SUBGRAPH);
	Desc *mask = find(CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR, 0);
	EXPECT_TRUE(sub && sub->finalized && mask && linked(sub, CUDNN_ATTR_OPERATIONGRAPH_OPS) == mask);
	EXPECT_TRUE(int_attr(op, CUDNN_ATTR_OPERATION_SDPA_BWD_SUBGRAPH_INPUT_UID) == CUDNN_SDPA_SCORES);
	EXPECT_TRUE(int_attr(op, CUDNN_ATTR_OPERATION_SDPA_BWD_SUBGRAPH_OUTPUT_UID) == CUDNN_SDPA_MASKED);
	EXPECT_TRUE(int_attr(mask, CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_COMPARISON_MODE) == CUDNN_POINTWISE_CMP_GE);
	Desc *x = linked(mask, CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_XDESC);
	Desc *y = linked(mask, CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_YDESC);
	int64_t dims[4] = {1, HQ, T, T}, strides[4] = {HQ * T * T, T * T, T, 1};
	EXPECT_TRUE(x && int_attr(x, CUDNN_ATTR_TENSOR_UNIQUE_ID) == CUDNN_SDPA_SCORES && int_attr(x, CUDNN_ATTR_TENSOR_IS_VIRTUAL) == 1 &&
	      int_attr(x, CUDNN_ATTR_TENSOR_DATA_TYPE) == CUDNN_DATA_FLOAT && ints_equal(x, CUDNN_ATTR_TENSOR_DIMENSIONS, dims, 4) &&
	      ints_equal(x, CUDNN_ATTR_TENSOR_STRIDES, strides, 4));
	EXPECT_TRUE(y && int_attr(y, CUDNN_ATTR_TENSOR_UNIQUE_ID) == CUDNN_SDPA_MASKED && int_attr(y, CUDNN_ATTR_TENSOR_IS_VIRTUAL) == 1);
	EXPECT_TRUE(is_scalar(linked(mask, CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_SHIFT_RIGHT_BOUND_DESC), CUDNN_SDPA_BOUND,
			CUDNN_DATA_INT32));
	EXPECT_TRUE(is_scalar(linked(mask, CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_BDESC), CUDNN_SDPA_FILL, CUDNN_DATA_FLOAT));
	/* the run binds the gradients and the two by-value scalars: right-bound shift 0, fill -inf */
	char p[10];
	Cudnn_Sdpa_Args a = {&p[0], &p[1], &p[2], &p[3], &p[4], &p[5], &p[6], &p[7], &p[8], 0.5f, NULL};
	EXPECT_TRUE(cudnn_sdpa_execute(&api, (cudnnHandle_t)&handle_token, &plan, &a) == DATAFLOW_OK);
	const Attr *uids = attr(executed_pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
	const Attr *ptrs = attr(executed_pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
	EXPECT_TRUE(uids && uids->count == 12);
	int seen = 0;
	for (int i = 0; uids && i < uids->count; i++) {
		int64_t u = uids->ints[i];
		seen |= 1 << u;
		if (u == CUDNN_SDPA_BOUND)
			EXPECT_TRUE(*(const int32_t *)ptrs->ptrs[i] == 0);
		else if (u == CUDNN_SDPA_FILL)
			EXPECT_TRUE(isinf(*(const float *)ptrs->ptrs[i]) && *(const float *)ptrs->ptrs[i] < 0);
		else if (u == CUDNN_SDPA_DQ)
			EXPECT_TRUE(ptrs->ptrs[i] == &p[6]);
		else if (u == CUDNN_SDPA_DV)
			EXPECT_TRUE(ptrs->ptrs[i] == &p[8]);
		else if (u == CUDNN_SDPA_DO)
			EXPECT_TRUE(ptrs->ptrs[i] == &p[3]);
	}
	EXPECT_TRUE(seen == 0x1ffe); /* uids 1 .. 12 */
	cudnn_sdpa_release(&api, &plan);
	EXPECT_TRUE(live == 0 && misuse == 0);
}

static void test_no_engine(void)
{
	reset();
	offered_configs = 0; /* neither mode A nor the fallback list offers a config */
	Cudnn_Sdpa_Shape s = {CUDNN_DATA_BFLOAT16, T, HQ, HKV, D, 1, 0};
	Cudnn_Sdpa_Plan plan;
	EXPECT_TRUE(cudnn_sdpa_build(&api, (cudnnHandle_t)&handle_token, &s, &plan) == DATAFLOW_ERR_UNSUPPORTED);
	EXPECT_TRUE(strstr(dataflow_last_error(), "no engine") != NULL);
	EXPECT_TRUE(count_type(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR) == 2); /* A, then FALLBACK */
	EXPECT_TRUE(int_attr(find(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, 1), CUDNN_ATTR_ENGINEHEUR_MODE) == CUDNN_HEUR_MODE_FALLBACK);
	EXPECT_TRUE(live == 0 && misuse == 0 && plan.plan == NULL);
	reset();
	refuse_first_plans = 100; /* configs offered, every plan refused */
	EXPECT_TRUE(cudnn_sdpa_build(&api, (cudnnHandle_t)&handle_token, &s, &plan) == DATAFLOW_ERR_UNSUPPORTED);
	EXPECT_TRUE(live == 0 && misuse == 0);
	reset();
}

/* Each status family, from building (the op's finalize) and from executing: refusals (the
 * attention op then runs its native kernels) come back as DATAFLOW_ERR_UNSUPPORTED, the rest as
 * DATAFLOW_ERR_BACKEND; the message names the status either way, and nothing leaks. */
static void test_status_families(void)
{
	static const struct {
		cudnnStatus_t status;
		Dataflow_Status want;
	} cases[] = {
		{1001, DATAFLOW_ERR_BACKEND},	  /* not initialized */
		{1002, DATAFLOW_ERR_UNSUPPORTED}, /* sub-library version mismatch */
		{1008, DATAFLOW_ERR_UNSUPPORTED}, /* sub-library loading failed */
		{2000, DATAFLOW_ERR_UNSUPPORTED}, {2003, DATAFLOW_ERR_UNSUPPORTED}, {2012, DATAFLOW_ERR_UNSUPPORTED},
		{3000, DATAFLOW_ERR_UNSUPPORTED}, {3001, DATAFLOW_ERR_UNSUPPORTED}, {3002, DATAFLOW_ERR_UNSUPPORTED},
		{3007, DATAFLOW_ERR_UNSUPPORTED}, {3010, DATAFLOW_ERR_UNSUPPORTED}, {3014, DATAFLOW_ERR_UNSUPPORTED},
		{4000, DATAFLOW_ERR_BACKEND},	  /* internal */
		{4001, DATAFLOW_ERR_UNSUPPORTED}, /* the fused kernel's runtime compilation failed */
		{4003, DATAFLOW_ERR_BACKEND},	  {5000, DATAFLOW_ERR_BACKEND}, {5001, DATAFLOW_ERR_BACKEND},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char status_text[32];
		snprintf(status_text, sizeof(status_text), "(%d)", cases[i].status);
		EXPECT_THAT(cudnn_status_is_refusal(cases[i].status) == (cases[i].want == DATAFLOW_ERR_UNSUPPORTED),
			    "status %d", cases[i].status);
		for (int backward = 0; backward < 2; backward++) {
			reset();
			op_status = cases[i].status;
			Cudnn_Sdpa_Shape s = {CUDNN_DATA_BFLOAT16, T, HQ, HKV, D, 1, backward};
			Cudnn_Sdpa_Plan plan;
			Dataflow_Status got = cudnn_sdpa_build(&api, (cudnnHandle_t)&handle_token, &s, &plan);
			EXPECT_THAT(got == cases[i].want && strstr(dataflow_last_error(), status_text) && live == 0 &&
					    plan.plan == NULL && misuse == 0,
				    "build, status %d: got %d (%s), %d live", cases[i].status, got, dataflow_last_error(),
				    live);
		}
		reset();
		Cudnn_Sdpa_Shape s = {CUDNN_DATA_HALF, T, HQ, HKV, D, 0, 0};
		Cudnn_Sdpa_Plan plan;
		CHECK(cudnn_sdpa_build(&api, (cudnnHandle_t)&handle_token, &s, &plan));
		execute_status = cases[i].status;
		char q;
		Cudnn_Sdpa_Args a = {.q = &q, .k = &q, .v = &q, .o = &q, .stats = &q, .scale = 1.0f};
		Dataflow_Status got = cudnn_sdpa_execute(&api, (cudnnHandle_t)&handle_token, &plan, &a);
		EXPECT_THAT(got == cases[i].want && strstr(dataflow_last_error(), status_text),
			    "execute, status %d: got %d (%s)", cases[i].status, got, dataflow_last_error());
		cudnn_sdpa_release(&api, &plan);
		EXPECT_THAT(live == 0 && misuse == 0, "execute, status %d: %d live, %d misuse", cases[i].status, live,
			    misuse);
	}
	reset();
}

int main(void)
{
	test_forward();
	test_causal_backward();
	test_no_engine();
	test_status_families();
	return *c_test_failures() != 0;
}
