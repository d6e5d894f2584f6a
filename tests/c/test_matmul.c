/* C-level check through the installed API: create a host handle, register the default
 * ops, run matmuls (fp32 and bf16, with a transpose and beta) against a double-precision
 * reference, and check that a bad call fails with a message and loses nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "c_test.h"
#include "dataflow/ops.h"

/* D = A^T(op) B + beta C with A stored K x M (trans_a), all fp32 in memory. Returns max error. */
static double run_case(Dataflow_Handle *h, DataflowDatatype in_dt, int64_t M, int64_t N, int64_t K, float beta)
{
	size_t in_size = dataflow_datatype_size(in_dt);
	float *a = malloc(sizeof(float) * (size_t)(M * K)), *b = malloc(sizeof(float) * (size_t)(K * N));
	float *c = malloc(sizeof(float) * (size_t)(M * N)), *d = malloc(sizeof(float) * (size_t)(M * N));
	void *a_in = malloc(in_size * (size_t)(M * K)), *b_in = malloc(in_size * (size_t)(K * N));
	srand(1234);
	for (int64_t i = 0; i < M * K; i++)
		a[i] = (float)(rand() % 17 - 8) / 8.0f; /* exact in bf16: the reference isolates accumulation */
	for (int64_t i = 0; i < K * N; i++)
		b[i] = (float)(rand() % 13 - 6) / 4.0f;
	for (int64_t i = 0; i < M * N; i++)
		c[i] = (float)(i % 7);
	CHECK(dataflow_convert(in_dt, a_in, DATAFLOW_FP32, a, (size_t)(M * K)));
	CHECK(dataflow_convert(in_dt, b_in, DATAFLOW_FP32, b, (size_t)(K * N)));

	void *dA, *dB, *dD;
	CHECK(dataflow_alloc_mem(h, in_size * (uint64_t)(M * K), &dA));
	CHECK(dataflow_alloc_mem(h, in_size * (uint64_t)(K * N), &dB));
	CHECK(dataflow_alloc_mem(h, sizeof(float) * (uint64_t)(M * N), &dD));
	CHECK(dataflow_submit_inbound_transfer(h, 0, dA, a_in, in_size * (uint64_t)(M * K)));
	CHECK(dataflow_submit_inbound_transfer(h, 1, dB, b_in, in_size * (uint64_t)(K * N)));
	CHECK(dataflow_submit_inbound_transfer(h, 0, dD, c, sizeof(float) * (uint64_t)(M * N)));
	Dataflow_Stream_State ready;
	CHECK(dataflow_get_stream_state(h, 1, &ready));
	CHECK(dataflow_submit_dependency(h, 0, &ready));
	CHECK(dataflow_submit_matmul(h, 0, in_dt, DATAFLOW_FP32, dA, dB, dD, dD, M, N, K, 1, 0, 1.0f, beta));
	CHECK(dataflow_submit_outbound_transfer(h, 0, d, dD, sizeof(float) * (uint64_t)(M * N)));
	CHECK(dataflow_sync_handle(h));

	double max_err = 0;
	for (int64_t i = 0; i < M; i++)
		for (int64_t j = 0; j < N; j++) {
			double ref = beta * c[i * N + j];
			for (int64_t k = 0; k < K; k++)
				ref += (double)a[k * M + i] * b[k * N + j];
			double err = fabs(ref - d[i * N + j]);
			max_err = err > max_err ? err : max_err;
		}
	CHECK(dataflow_free_mem(h, dA));
	CHECK(dataflow_free_mem(h, dB));
	CHECK(dataflow_free_mem(h, dD));
	free(a), free(b), free(c), free(d), free(a_in), free(b_in);
	return max_err;
}

int main(void)
{
	Dataflow_Handle_Config config = {.num_streams = 2, .device_memory_bytes = 64u << 20};
	Dataflow_Handle *h;
	CHECK(dataflow_handle_create("host", &config, &h));
	CHECK(dataflow_register_default_ops(h));

	double err32 = run_case(h, DATAFLOW_FP32, 33, 17, 129, 0.5f);
	double err16 = run_case(h, DATAFLOW_BF16, 7, 65, 40, 0.0f);
	printf("matmul fp32 max abs error %.3g, bf16 %.3g\n", err32, err16);
	int failed = err32 > 1e-3 || err16 > 1e-3;

	/* a bad call: N = 0 is rejected with a message, and the handle keeps working */
	void *p;
	CHECK(dataflow_alloc_mem(h, 1024, &p));
	Dataflow_Status st = dataflow_submit_matmul(h, 0, DATAFLOW_FP32, DATAFLOW_FP32, p, p, NULL, p, 4, 0, 4, 0, 0,
						    1.0f, 0.0f);
	printf("bad call: status %s, message \"%s\"\n", dataflow_status_name(st), dataflow_last_error());
	failed |= st != DATAFLOW_ERR_INVALID_ARGUMENT;
	Dataflow_Memory_Info mem;
	CHECK(dataflow_memory_info(h, &mem));
	failed |= mem.in_use_bytes != 1024;
	CHECK(dataflow_free_mem(h, p));
	CHECK(dataflow_memory_info(h, &mem));
	failed |= mem.in_use_bytes != 0;
	CHECK(dataflow_handle_destroy(h));
	printf("%s\n", failed ? "FAIL" : "ok");
	return failed;
}
