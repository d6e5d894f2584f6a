/* Lifetimes across handles and threads, through the public API (run under ASan + UBSan by
 * tests/c/test_c_api.py): events and peer links of a destroyed handle fail clearly, a destroy
 * from the handle's own work is refused instead of deadlocking, calls on a handle being
 * destroyed fail clearly, and work queued on a peer finishes before the memory it reads goes.
 * (A raw submit_op of a default op with bad tensors: test_op_checks.c.) */

#include "c_test.h"

static void test_event_of_destroyed_handle(void)
{
	Dataflow_Handle *a = open_host(2, 1 << 20, "threads=2"), *b = open_host(2, 1 << 20, "threads=2");
	Dataflow_Stream_State state;
	CHECK(dataflow_get_stream_state(b, 1, &state));
	CHECK(dataflow_submit_dependency(a, 0, &state)); /* fine while b is open */
	CHECK(dataflow_handle_destroy(b));
	EXPECT_ERROR(dataflow_submit_dependency(a, 0, &state), DATAFLOW_ERR_INVALID_ARGUMENT, "has been destroyed");
	Dataflow_Stream_State never = {0};
	EXPECT_ERROR(dataflow_submit_dependency(a, 0, &never), DATAFLOW_ERR_INVALID_ARGUMENT, "never recorded");
	CHECK(dataflow_sync_handle(a));
	CHECK(dataflow_handle_destroy(a));
}

static void test_peer_destroyed(void)
{
	enum { N = 4096 };
	Dataflow_Handle *a = open_host(1, 1 << 20, "threads=2"), *b = open_host(1, 1 << 20, "threads=2");
	uint8_t src[N], out[N];
	for (int i = 0; i < N; i++)
		src[i] = (uint8_t)(i * 7);
	void *pa, *pb;
	CHECK(dataflow_alloc_mem(a, N, &pa));
	CHECK(dataflow_alloc_mem(b, N, &pb));
	CHECK(dataflow_submit_inbound_transfer(b, 0, pb, src, N));
	CHECK(dataflow_sync_handle(b));
	EXPECT_ERROR(dataflow_submit_peer_transfer(a, 0, pa, pb, N), DATAFLOW_ERR_INVALID_ARGUMENT, "nor of a peer");
	CHECK(dataflow_enable_access_to_peer_mem(a, b));
	EXPECT_ERROR(dataflow_enable_access_to_peer_mem(a, b), DATAFLOW_ERR_INVALID_ARGUMENT, "already enabled");

	/* a's copy from b's memory waits behind a gate; destroying b waits for it */
	Gate gate = GATE_INIT;
	pthread_t opener;
	CHECK(dataflow_submit_host_op(a, gate_wait, &gate, 0));
	CHECK(dataflow_submit_peer_transfer(a, 0, pa, pb, N));
	pthread_create(&opener, NULL, gate_open_later, &gate);
	CHECK(dataflow_handle_destroy(b));
	pthread_join(opener, NULL);
	CHECK(dataflow_submit_outbound_transfer(a, 0, out, pa, N));
	CHECK(dataflow_sync_handle(a));
	EXPECT(memcmp(src, out, N) == 0);

	/* the link went with b */
	EXPECT_ERROR(dataflow_submit_peer_transfer(a, 0, pa, pb, N), DATAFLOW_ERR_INVALID_ARGUMENT, "nor of a peer");
	EXPECT_ERROR(dataflow_disable_access_to_peer_mem(a, b), DATAFLOW_ERR_INVALID_ARGUMENT, "not enabled");
	CHECK(dataflow_handle_destroy(a));
}

static Dataflow_Handle *to_destroy;

static void destroy_from_host_op(void *outcome)
{
	outcome_keep(outcome, dataflow_handle_destroy(to_destroy));
}

static Dataflow_Status destroy_from_external_op(Dataflow_Handle *h, int stream_id, const Op *op, void *outcome)
{
	(void)stream_id;
	(void)op;
	outcome_keep(outcome, dataflow_handle_destroy(h));
	return DATAFLOW_OK;
}

static void test_destroy_from_own_work(void)
{
	Dataflow_Handle *h = to_destroy = open_host(2, 1 << 20, "threads=2");
	Outcome from_host = {DATAFLOW_OK, ""}, from_external = {DATAFLOW_OK, ""};
	CHECK(dataflow_submit_host_op(h, destroy_from_host_op, &from_host, 1));

	Op_Skeleton s;
	CHECK(dataflow_op_skeleton_init(&s, "destroy_self", 0, NULL));
	Dataflow_Op_State state = {&from_external, NULL};
	CHECK(dataflow_register_external_func(h, &s, destroy_from_external_op, &state, NULL, 0));
	Op op = {.skeleton = s};
	CHECK(dataflow_submit_op(h, &op, 0));

	CHECK(dataflow_sync_handle(h)); /* both ran: the handle is still open */
	EXPECT_OUTCOME(&from_host, DATAFLOW_ERR_INVALID_ARGUMENT, "from work queued on this handle");
	/* an op submitted to an idle handle runs on the submitting thread (host streams): then it is
	 * refused as a call from inside a call on the handle, else as work queued on it */
	EXPECT_OUTCOME(&from_external, DATAFLOW_ERR_INVALID_ARGUMENT, "handle destroy: called from");
	void *p;
	CHECK(dataflow_alloc_mem(h, 256, &p));
	CHECK(dataflow_handle_destroy(h));
}

/* Queued before the destroy and run while it waits for the work: its calls find the handle
 * no longer open (out of the registry, not yet freed). */
typedef struct {
	Dataflow_Handle *h;
	Gate *gate;
	Outcome alloc, submit;
} Late_Call;

static void call_while_closing(void *arg)
{
	Late_Call *c = arg;
	gate_wait(c->gate);
	sleep_ms(50); /* the destroy has begun by now */
	void *p;
	outcome_keep(&c->alloc, dataflow_alloc_mem(c->h, 256, &p));
	outcome_keep(&c->submit, dataflow_submit_host_op(c->h, gate_wait, c->gate, 0));
}

static void test_calls_on_closing_handle(void)
{
	Dataflow_Handle *h = open_host(1, 1 << 20, "threads=2");
	Gate gate = GATE_INIT;
	Late_Call call = {h, &gate, {DATAFLOW_OK, ""}, {DATAFLOW_OK, ""}};
	CHECK(dataflow_submit_host_op(h, call_while_closing, &call, 0));
	pthread_t opener;
	pthread_create(&opener, NULL, gate_open_later, &gate);
	CHECK(dataflow_handle_destroy(h));
	pthread_join(opener, NULL);
	EXPECT_OUTCOME(&call.alloc, DATAFLOW_ERR_INVALID_ARGUMENT, "not an open handle (destroyed or being destroyed");
	EXPECT_OUTCOME(&call.submit, DATAFLOW_ERR_INVALID_ARGUMENT, "not an open handle (destroyed or being destroyed");
	EXPECT(dataflow_handle_destroy(NULL) == DATAFLOW_OK);
}

int main(void)
{
	test_event_of_destroyed_handle();
	test_peer_destroyed();
	test_destroy_from_own_work();
	test_calls_on_closing_handle();
	printf("ok\n");
	return 0;
}
