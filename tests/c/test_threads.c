/* One handle used from several threads at once (the contract in handle.h): each thread
 * allocates, uploads, runs add on its own stream with a dependency on another stream, reads
 * back, checks the values against the arithmetic, and frees; another thread registers and
 * replaces an op while they run. Under ASan + UBSan this also checks the locking. */
#include <pthread.h>

#include "c_test.h"
#include "dataflow/ops.h"

enum { THREADS = 4, ITERS = 300, N = 1000 };

static Dataflow_Handle *h;

static void *worker(void *arg)
{
	int id = (int)(intptr_t)arg;
	float in[N], out[N];
	for (int it = 0; it < ITERS; it++) {
		int stream = (id + it) % THREADS;
		for (int i = 0; i < N; i++)
			in[i] = (float)(id * 1000 + it + i);
		void *x, *y;
		CHECK(dataflow_alloc_mem(h, sizeof(in), &x));
		CHECK(dataflow_alloc_mem(h, sizeof(in), &y));
		CHECK(dataflow_submit_inbound_transfer(h, stream, x, in, sizeof(in)));
		Dataflow_Stream_State uploaded;
		CHECK(dataflow_get_stream_state(h, stream, &uploaded));
		int other = (stream + 1) % THREADS;
		CHECK(dataflow_submit_dependency(h, other, &uploaded));
		CHECK(dataflow_submit_add(h, other, DATAFLOW_FP32, N, 2.0f, x, 1.0f, x, y)); /* y = 3x */
		CHECK(dataflow_free_mem(h, x)); /* stream-ordered: the add still reads it */
		CHECK(dataflow_submit_outbound_transfer(h, other, out, y, sizeof(out)));
		CHECK(dataflow_sync_stream(h, other));
		for (int i = 0; i < N; i++)
			EXPECT(out[i] == 3.0f * in[i]);
		CHECK(dataflow_free_mem(h, y));
	}
	return NULL;
}

static Dataflow_Status noop(Dataflow_Handle *handle, int stream_id, const Op *op, void *state)
{
	(void)handle;
	(void)stream_id;
	(void)op;
	(void)state;
	return DATAFLOW_OK;
}

static void *registrar(void *arg)
{
	(void)arg;
	Op_Skeleton s;
	CHECK(dataflow_op_skeleton_init(&s, "noop", 0, NULL));
	CHECK(dataflow_register_external_func(h, &s, noop, NULL, NULL, 0));
	Op op = {.skeleton = s};
	for (int i = 0; i < 50; i++) {
		CHECK(dataflow_submit_op(h, &op, i % THREADS));
		CHECK(dataflow_register_external_func(h, &s, noop, NULL, NULL, DATAFLOW_REGISTER_REPLACE));
	}
	return NULL;
}

int main(void)
{
	Dataflow_Handle_Config config = {.num_streams = THREADS, .device_memory_bytes = 64 << 20, .options = "threads=2"};
	CHECK(dataflow_handle_create("host", &config, &h));
	CHECK(dataflow_register_default_ops(h));
	pthread_t threads[THREADS + 1];
	for (int i = 0; i < THREADS; i++)
		pthread_create(&threads[i], NULL, worker, (void *)(intptr_t)i);
	pthread_create(&threads[THREADS], NULL, registrar, NULL);
	for (int i = 0; i <= THREADS; i++)
		pthread_join(threads[i], NULL);
	CHECK(dataflow_sync_handle(h));
	Dataflow_Memory_Info info;
	CHECK(dataflow_memory_info(h, &info));
	EXPECT(info.in_use_bytes == 0 && info.peak_bytes >= 2 * sizeof(float) * N);
	CHECK(dataflow_handle_destroy(h));
	printf("ok\n");
	return 0;
}
