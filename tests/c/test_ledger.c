/* The memory ledger through the public API: stream-ordered frees that never block, an
 * allocation that waits for memory still used by queued work, the peak and its reset, the
 * capacity (never wrapping), host ranges, and the host backend's options. */
#include <stdint.h>

#include "c_test.h"

static uint64_t in_use(Dataflow_Handle *h)
{
	Dataflow_Memory_Info info;
	CHECK(dataflow_memory_info(h, &info));
	return info.in_use_bytes;
}

/* The free returns while the work using the block is held back (it cannot have waited for
 * it: only this thread opens the gate); the block counts until that work is done. */
static void test_free_is_stream_ordered(void)
{
	Dataflow_Handle *h = open_host(2, 1 << 20, NULL);
	Gate gate = GATE_INIT;
	void *p;
	CHECK(dataflow_alloc_mem(h, 1000, &p));
	CHECK(dataflow_submit_host_op(h, gate_wait, &gate, 1));
	CHECK(dataflow_set_mem(h, 1, p, 7, 1000));
	CHECK(dataflow_free_mem(h, p));
	EXPECT_ERROR(dataflow_set_mem(h, 0, p, 7, 1000), DATAFLOW_ERR_INVALID_ARGUMENT, "freed?");
	EXPECT_ERROR(dataflow_free_mem(h, p), DATAFLOW_ERR_INVALID_ARGUMENT, "already freed?");
	EXPECT(in_use(h) == 1024);
	gate_open(&gate);
	CHECK(dataflow_sync_handle(h));
	EXPECT(in_use(h) == 0);
	CHECK(dataflow_handle_destroy(h));
}

/* An allocation past the capacity waits for memory freed but still used by queued work. */
static void test_alloc_waits_for_pending_frees(void)
{
	Dataflow_Handle *h = open_host(2, 1 << 20, NULL);
	Gate gate = GATE_INIT;
	void *a, *b, *c;
	CHECK(dataflow_alloc_mem(h, 768 << 10, &a));
	CHECK(dataflow_submit_host_op(h, gate_wait, &gate, 0));
	CHECK(dataflow_set_mem(h, 0, a, 1, 768 << 10));
	CHECK(dataflow_free_mem(h, a));
	pthread_t opener;
	pthread_create(&opener, NULL, gate_open_later, &gate);
	CHECK(dataflow_alloc_mem(h, 768 << 10, &b));
	pthread_join(opener, NULL);
	EXPECT(in_use(h) == 768 << 10);
	EXPECT_ERROR(dataflow_alloc_mem(h, 512 << 10, &c), DATAFLOW_ERR_OUT_OF_MEMORY,
		     "cannot allocate 524288 bytes (524288 after 256-byte alignment): capacity 1048576, in use 786432");
	EXPECT_ERROR(dataflow_alloc_mem(h, (2 << 20) + 1, &c), DATAFLOW_ERR_OUT_OF_MEMORY, "capacity is 1048576 bytes");
	CHECK(dataflow_handle_destroy(h));
}

static void test_peak(void)
{
	Dataflow_Handle *h = open_host(2, 1 << 20, NULL);
	Dataflow_Memory_Info info;
	void *a, *b;
	CHECK(dataflow_alloc_mem(h, 1000, &a));
	CHECK(dataflow_alloc_mem(h, 3000, &b));
	CHECK(dataflow_free_mem(h, a));
	CHECK(dataflow_free_mem(h, b));
	CHECK(dataflow_memory_info(h, &info));
	EXPECT(info.capacity_bytes == 1 << 20 && info.in_use_bytes == 0 && info.peak_bytes == 1024 + 3072);
	CHECK(dataflow_reset_memory_peak(h));
	CHECK(dataflow_alloc_mem(h, 10, &a));
	CHECK(dataflow_memory_info(h, &info));
	EXPECT(info.in_use_bytes == 256 && info.peak_bytes == 256);
	CHECK(dataflow_handle_destroy(h));
}

/* A capacity near 2^64 is an error (more than the address space), never a wrapped 0. */
static void test_capacity_never_wraps(void)
{
	Dataflow_Handle_Config config = {.num_streams = 1, .device_memory_bytes = UINT64_MAX};
	Dataflow_Handle *h = NULL;
	EXPECT_ERROR(dataflow_handle_create("host", &config, &h), DATAFLOW_ERR_OUT_OF_MEMORY,
		     "cannot reserve 18446744073709551360 bytes of address space");
	EXPECT(h == NULL);
}

static void test_host_ranges(void)
{
	Dataflow_Handle *h = open_host(2, 1 << 20, NULL);
	static uint8_t host[4096];
	EXPECT_ERROR(dataflow_set_mem(h, 0, host, 1, sizeof(host)), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "not device memory of this handle");
	CHECK(dataflow_enable_access_to_host_mem(h, host, sizeof(host), 0));
	EXPECT_ERROR(dataflow_enable_access_to_host_mem(h, host + 100, 10, 0), DATAFLOW_ERR_INVALID_ARGUMENT, "overlaps");
	CHECK(dataflow_set_mem(h, 0, host + 96, 5, 4000));
	CHECK(dataflow_sync_handle(h));
	EXPECT(host[95] == 0 && host[96] == 5 && host[4095] == 5);
	CHECK(dataflow_disable_access_to_host_mem(h, host));
	EXPECT_ERROR(dataflow_disable_access_to_host_mem(h, host), DATAFLOW_ERR_INVALID_ARGUMENT, "was not registered");
	EXPECT_ERROR(dataflow_set_mem(h, 0, host, 1, 1), DATAFLOW_ERR_INVALID_ARGUMENT, "not device memory");
	CHECK(dataflow_handle_destroy(h));
}

static void test_options(void)
{
	Dataflow_Handle_Config config = {.num_streams = 1, .device_memory_bytes = 1 << 20};
	Dataflow_Handle *h;
	const struct {
		const char *options, *message;
	} bad[] = {
		{"threads=5000", "host backend option threads: must be in [1, "},
		{"threads=0", "must be in [1, "},
		{"threads=1.5", "expected a whole number, got 1.5"},
		{"threads=two", "expected a number, got \"two\""},
		{"threads", "has no value"},
		{"threads=1,threads=2", "threads given twice"},
		{"transfer_bytes_per_sec=-1", "transfer_bytes_per_sec: must be in [0, "},
		{"threads=2,speed=3", "unknown option \"speed\"; known: threads, transfer_bytes_per_sec"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		config.options = bad[i].options;
		EXPECT_ERROR(dataflow_handle_create("host", &config, &h), DATAFLOW_ERR_INVALID_ARGUMENT, bad[i].message);
	}
	config.options = "threads=1,transfer_bytes_per_sec=1e9,";
	CHECK(dataflow_handle_create("host", &config, &h));
	CHECK(dataflow_handle_destroy(h));
}

int main(void)
{
	test_free_is_stream_ordered();
	test_alloc_waits_for_pending_frees();
	test_peak();
	test_capacity_never_wraps();
	test_host_ranges();
	test_options();
	printf("ok\n");
	return 0;
}
