/* A complete C program on the installed library: a host handle, the default ops, a bf16 matmul
 * with fp32 output, data moved in and out on two streams ordered by an event.
 *
 *   cc examples/c/matmul.c $(pkg-config --cflags --libs dataflow) -o matmul && ./matmul
 */
#include <stdio.h>
#include <stdlib.h>

#include "dataflow/dataflow.h"
#include "dataflow/ops.h"

#define CHECK(call)                                                                          \
	do {                                                                                 \
		if ((call) != DATAFLOW_OK) {                                                 \
			fprintf(stderr, "%s failed: %s\n", #call, dataflow_last_error());   \
			return 1;                                                            \
		}                                                                            \
	} while (0)

enum { M = 64, N = 48, K = 32 };

int main(void)
{
	static float a[M * K], b[K * N], d[M * N];
	static uint16_t a16[M * K], b16[K * N];
	for (int i = 0; i < M * K; i++)
		a[i] = (float)(i % 5) - 2.0f;
	for (int i = 0; i < K * N; i++)
		b[i] = (float)(i % 3) * 0.5f;
	CHECK(dataflow_convert(DATAFLOW_BF16, a16, DATAFLOW_FP32, a, M * K)); /* exact: small integers */
	CHECK(dataflow_convert(DATAFLOW_BF16, b16, DATAFLOW_FP32, b, K * N));

	Dataflow_Handle_Config config = {.num_streams = 2, .device_memory_bytes = 16u << 20};
	Dataflow_Handle *h;
	CHECK(dataflow_handle_create("host", &config, &h));
	CHECK(dataflow_register_default_ops(h));

	void *dA, *dB, *dD;
	CHECK(dataflow_alloc_mem(h, sizeof(a16), &dA));
	CHECK(dataflow_alloc_mem(h, sizeof(b16), &dB));
	CHECK(dataflow_alloc_mem(h, sizeof(d), &dD));
	CHECK(dataflow_submit_inbound_transfer(h, 0, dA, a16, sizeof(a16)));
	CHECK(dataflow_submit_inbound_transfer(h, 1, dB, b16, sizeof(b16)));
	Dataflow_Stream_State b_ready; /* stream 0 computes once stream 1's transfer is done */
	CHECK(dataflow_get_stream_state(h, 1, &b_ready));
	CHECK(dataflow_submit_dependency(h, 0, &b_ready));
	/* D = A @ B: no transposes, alpha 1, beta 0 (C unused) */
	CHECK(dataflow_submit_matmul(h, 0, DATAFLOW_BF16, DATAFLOW_FP32, dA, dB, NULL, dD, M, N, K, 0, 0, 1.0f, 0.0f));
	CHECK(dataflow_submit_outbound_transfer(h, 0, d, dD, sizeof(d)));
	CHECK(dataflow_sync_handle(h));

	int wrong = 0;
	float ref = 0; /* ends as the last element's reference */
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			ref = 0;
			for (int k = 0; k < K; k++)
				ref += a[i * K + k] * b[k * N + j];
			wrong += ref != d[i * N + j];
		}
	CHECK(dataflow_free_mem(h, dA));
	CHECK(dataflow_free_mem(h, dB));
	CHECK(dataflow_free_mem(h, dD));
	dataflow_handle_destroy(h);
	printf("bf16 matmul %dx%dx%d on the host backend: %s (%d of %d elements differ; D[%d][%d] = %g, expected %g)\n",
	       M, N, K, wrong ? "WRONG" : "exact", wrong, M * N, M - 1, N - 1, d[M * N - 1], ref);
	return wrong != 0;
}
