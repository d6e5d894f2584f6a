/* Use after close through the public API (run under ASan + UBSan by tests/c/test_c_api.py): a call
 * on a destroyed handle, a second destroy, a destroyed peer and a model that outlived its handle
 * fail with a clear error, and libdataflow finds out from its registry of open handles, never by
 * reading the freed handle (ASan would report the read). */

#include "c_test.h"
#include "tiny_llama.h"
#include "dataflow/models.h"
#include "dataflow/ops.h"

static void test_calls_on_a_destroyed_handle(void)
{
	Dataflow_Handle *h = open_host(1, 1 << 20, "threads=1");
	CHECK(dataflow_handle_destroy(h));
	void *p = NULL;
	Dataflow_Memory_Info info;
	EXPECT_ERROR(dataflow_alloc_mem(h, 256, &p), DATAFLOW_ERR_INVALID_ARGUMENT, "alloc_mem: not an open handle");
	EXPECT_ERROR(dataflow_memory_info(h, &info), DATAFLOW_ERR_INVALID_ARGUMENT, "not an open handle");
	EXPECT_ERROR(dataflow_sync_handle(h), DATAFLOW_ERR_INVALID_ARGUMENT, "not an open handle");
	EXPECT_ERROR(dataflow_handle_destroy(h), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "handle destroy: not an open handle (destroyed already");
}

static void test_a_destroyed_peer(void)
{
	Dataflow_Handle *a = open_host(1, 1 << 20, "threads=1"), *b = open_host(1, 1 << 20, "threads=1");
	CHECK(dataflow_handle_destroy(b));
	EXPECT_ERROR(dataflow_enable_access_to_peer_mem(a, b), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "peer must be another open handle");
	CHECK(dataflow_handle_destroy(a));
}

static void test_a_pointer_that_never_was_a_handle(void)
{
	Dataflow_Handle *fake = (Dataflow_Handle *)&test_a_pointer_that_never_was_a_handle;
	void *p = NULL;
	EXPECT_ERROR(dataflow_alloc_mem(fake, 256, &p), DATAFLOW_ERR_INVALID_ARGUMENT, "not an open handle");
	EXPECT_ERROR(dataflow_handle_destroy(fake), DATAFLOW_ERR_INVALID_ARGUMENT, "not an open handle");
}

static void test_a_model_that_outlived_its_handle(void)
{
	Dataflow_Handle *h = open_host(2, 64 << 20, "threads=1");
	CHECK(dataflow_register_default_ops(h));
	Dataflow_Llama_Config c = tiny_llama_config();
	Dataflow_Llama *m;
	CHECK(dataflow_llama_create(h, &c, &m));
	CHECK(dataflow_handle_destroy(h));
	EXPECT_ERROR(dataflow_llama_alloc_optimizer_state(m, 0), DATAFLOW_ERR_INVALID_ARGUMENT, "not an open handle");
	EXPECT_TRUE(dataflow_handle_num_streams(h) == 0);
	dataflow_llama_destroy(m); /* frees its host structures; the device memory went with the handle */
}

int main(void)
{
	test_calls_on_a_destroyed_handle();
	test_a_destroyed_peer();
	test_a_pointer_that_never_was_a_handle();
	test_a_model_that_outlived_its_handle();
	if (*c_test_failures() == 0)
		printf("closing: ok\n");
	return *c_test_failures() != 0;
}
