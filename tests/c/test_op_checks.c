/* dataflow_submit_op checks every submission against the signature its op was registered with
 * (run under ASan + UBSan by tests/c/test_c_api.py): a raw submit_op of a default op with NULL,
 * short, freed, foreign (host or another handle's) or overlapping tensors or a failed
 * requirement fails at the call with the signature's message and queues nothing; dataflow_op_check checks without submitting; a
 * user op registered with a signature is checked the same way; a signature that does not
 * compile fails the registration and registers nothing. */

#include "c_test.h"
#include "dataflow/op_args.h"
#include "dataflow/ops.h"

enum { N = 16 };

/* an add op (out = a + b over n fp32) built by hand, as a caller of submit_op would */
typedef struct {
	Dataflow_Add_Args args;
	Op op;
} Raw_Add;

static const Op *raw_add(Raw_Add *r, int64_t n, const void *a, const void *b, void *out)
{
	r->args = (Dataflow_Add_Args){.n = n, .alpha = 1.0f, .a = a, .beta = 1.0f, .b = b, .out = out};
	CHECK(dataflow_add_skeleton(&r->op.skeleton, DATAFLOW_FP32));
	dataflow_add_arg_pointers(&r->args, r->op.op_args);
	return &r->op;
}

static void upload(Dataflow_Handle *h, void *dst, float value)
{
	float host[N];
	for (int i = 0; i < N; i++)
		host[i] = value + (float)i;
	CHECK(dataflow_submit_inbound_transfer(h, 0, dst, host, sizeof(host)));
	CHECK(dataflow_sync_handle(h));
}

static float first(Dataflow_Handle *h, const void *src)
{
	float v;
	CHECK(dataflow_submit_outbound_transfer(h, 0, &v, src, sizeof(v)));
	CHECK(dataflow_sync_handle(h));
	return v;
}

static void test_raw_submit_of_default_op(void)
{
	Dataflow_Handle *h = open_host(1, 1 << 20, "threads=2");
	CHECK(dataflow_register_default_ops(h));
	float host[N];
	void *x, *y, *freed;
	CHECK(dataflow_alloc_mem(h, N * sizeof(float), &x));
	CHECK(dataflow_alloc_mem(h, N * sizeof(float), &y));
	CHECK(dataflow_alloc_mem(h, N * sizeof(float), &freed));
	CHECK(dataflow_free_mem(h, freed));
	upload(h, x, 1.0f);
	upload(h, y, -5.0f);
	Raw_Add r;
	EXPECT_ERROR(dataflow_submit_op(h, raw_add(&r, N, NULL, x, y), 0), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "add: a is NULL");
	EXPECT_ERROR(dataflow_submit_op(h, raw_add(&r, N, x, x, NULL), 0), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "add: out is NULL");
	EXPECT_ERROR(dataflow_submit_op(h, raw_add(&r, N + 1, x, x, y), 0), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "add: a (17 fp32 elements = n): range of 68 bytes at");
	EXPECT_ERROR(dataflow_submit_op(h, raw_add(&r, N + 1, x, x, y), 0), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "runs 4 bytes past the end of its allocation");
	EXPECT_ERROR(dataflow_submit_op(h, raw_add(&r, N, x, freed, y), 0), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "add: b (16 fp32 elements = n): pointer");
	EXPECT_ERROR(dataflow_submit_op(h, raw_add(&r, N, x, freed, y), 0), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "is not inside a live allocation (freed?)");
	EXPECT_ERROR(dataflow_submit_op(h, raw_add(&r, N, x, x, host), 0), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "not device memory of this handle");
	/* memory of another handle, not linked as a peer */
	Dataflow_Handle *other = open_host(1, 1 << 20, "threads=2");
	void *foreign;
	CHECK(dataflow_alloc_mem(other, N * sizeof(float), &foreign));
	EXPECT_ERROR(dataflow_submit_op(h, raw_add(&r, N, foreign, x, y), 0), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "add: a (16 fp32 elements = n): pointer");
	EXPECT_ERROR(dataflow_submit_op(h, raw_add(&r, N, foreign, x, y), 0), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "not device memory of this handle");
	CHECK(dataflow_free_mem(other, foreign));
	CHECK(dataflow_handle_destroy(other));
	EXPECT_ERROR(dataflow_submit_op(h, raw_add(&r, 0, x, x, y), 0), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "add: n must be > 0, got 0");
	EXPECT_ERROR(dataflow_submit_op(h, raw_add(&r, N / 2, x, x, (float *)x + 1), 0), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "bytes) overlap; out may only be exactly a or b");
	EXPECT(first(h, y) == -5.0f); /* nothing ran */
	/* checked without submitting: nothing runs either way */
	EXPECT_ERROR(dataflow_op_check(h, raw_add(&r, N + 1, x, x, y)), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "add: a (17 fp32 elements = n)");
	EXPECT_ERROR(dataflow_op_check(NULL, raw_add(&r, N, x, x, y)), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "op_check: handle is NULL");
	EXPECT_ERROR(dataflow_op_check(h, NULL), DATAFLOW_ERR_INVALID_ARGUMENT, "op_check: op is NULL");
	CHECK(dataflow_op_check(h, raw_add(&r, N, x, x, y)));
	EXPECT(first(h, y) == -5.0f);
	CHECK(dataflow_submit_op(h, raw_add(&r, N, x, x, y), 0));
	EXPECT(first(h, y) == 2.0f); /* 1 + 1 */
	CHECK(dataflow_submit_op(h, raw_add(&r, N, x, y, x), 0)); /* out exactly b: allowed */
	EXPECT(first(h, x) == 3.0f);
	CHECK(dataflow_free_mem(h, x));
	CHECK(dataflow_free_mem(h, y));
	CHECK(dataflow_handle_destroy(h));
}

/* "twice": y[i] = 2 * x[i] for i < n, an external op; counts its calls */
static int twice_calls;

static Dataflow_Status twice(Dataflow_Handle *h, int stream_id, const Op *op, void *state)
{
	(void)h;
	(void)stream_id;
	(void)state;
	int64_t n = *(const int64_t *)op->op_args[0];
	const float *x = *(const float *const *)op->op_args[1];
	float *y = *(float *const *)op->op_args[2];
	for (int64_t i = 0; i < n; i++)
		y[i] = 2.0f * x[i];
	twice_calls++;
	return DATAFLOW_OK;
}

static const char *const TWICE_SIGNATURE = "n; x: in[n]; y: out[n]; require n > 0 && n % 2 == 0";

static Op twice_op(const Op_Skeleton *s, int64_t *n, void **x, void **y)
{
	Op op = {.skeleton = *s};
	op.op_args[0] = n;
	op.op_args[1] = x;
	op.op_args[2] = y;
	return op;
}

static void test_user_op_with_signature(void)
{
	Dataflow_Handle *h = open_host(1, 1 << 20, "threads=2");
	Op_Skeleton s, bad, other;
	const DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_FP32, DATAFLOW_FP32};
	CHECK(dataflow_op_skeleton_init(&s, "twice", 3, dtypes));
	CHECK(dataflow_register_external_func(h, &s, twice, NULL, TWICE_SIGNATURE, 0));
	void *x, *y;
	CHECK(dataflow_alloc_mem(h, N * sizeof(float), &x));
	CHECK(dataflow_alloc_mem(h, N * sizeof(float), &y));
	upload(h, x, 1.0f);
	int64_t n = N;
	void *null = NULL, *shifted = (float *)x + 1;
	Op op = twice_op(&s, &n, &x, &null);
	EXPECT_ERROR(dataflow_submit_op(h, &op, 0), DATAFLOW_ERR_INVALID_ARGUMENT, "twice: y is NULL");
	n = 2 * N;
	op = twice_op(&s, &n, &x, &y);
	EXPECT_ERROR(dataflow_submit_op(h, &op, 0), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "twice: x (32 fp32 elements = n): range of 128 bytes");
	n = N - 2;
	op = twice_op(&s, &n, &x, &shifted);
	EXPECT_ERROR(dataflow_submit_op(h, &op, 0), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "bytes) overlap; y may not overlap another tensor");
	n = 3;
	op = twice_op(&s, &n, &x, &y);
	EXPECT_ERROR(dataflow_submit_op(h, &op, 0), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "twice: requires n > 0 && n % 2 == 0, got n = 3");
	CHECK(dataflow_sync_handle(h));
	EXPECT(twice_calls == 0);
	n = N;
	op = twice_op(&s, &n, &x, &y);
	CHECK(dataflow_submit_op(h, &op, 0));
	EXPECT(first(h, y) == 2.0f);
	EXPECT(twice_calls == 1);

	/* a signature that does not compile: nothing registered, not even the batch's good op */
	CHECK(dataflow_op_skeleton_init(&bad, "bad", 3, dtypes));
	EXPECT_ERROR(dataflow_register_external_func(h, &bad, twice, NULL, "n; x: in[n", 0),
		     DATAFLOW_ERR_INVALID_ARGUMENT,
		     "register: the signature of op 0 ('bad') does not compile: bad: signature error at offset");
	EXPECT(!dataflow_op_is_registered(h, &bad));
	CHECK(dataflow_op_skeleton_init(&other, "other", 3, dtypes));
	const Op_Skeleton batch[] = {other, bad};
	const char *const funcs[] = {"dataflow_host_matmul", "dataflow_host_matmul"};
	const char *const signatures[] = {TWICE_SIGNATURE, "n; x: in[n]"};
	EXPECT_ERROR(dataflow_register_external_code(h, dataflow_handle_default_ops_library(h), 2, batch, funcs, NULL,
						     signatures, 0),
		     DATAFLOW_ERR_INVALID_ARGUMENT,
		     "('bad') does not compile: bad: signature error at offset 11 (near ''): 2 argument clauses for 3 "
		     "arguments");
	EXPECT(!dataflow_op_is_registered(h, &other) && !dataflow_op_is_registered(h, &bad));
	/* nor does a failed replacement touch the registered op */
	EXPECT_ERROR(dataflow_register_external_func(h, &s, twice, NULL, "n; x: out[n]; y: out[m]",
						     DATAFLOW_REGISTER_REPLACE),
		     DATAFLOW_ERR_INVALID_ARGUMENT, "does not compile: twice: ");
	n = 3;
	EXPECT_ERROR(dataflow_submit_op(h, &op, 0), DATAFLOW_ERR_INVALID_ARGUMENT, "twice: requires n > 0");
	CHECK(dataflow_free_mem(h, x));
	CHECK(dataflow_free_mem(h, y));
	CHECK(dataflow_handle_destroy(h));
}

int main(void)
{
	test_raw_submit_of_default_op();
	test_user_op_with_signature();
	printf("ok\n");
	return 0;
}
