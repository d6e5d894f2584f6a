/* embedding_bwd_w on CUDA, an external op: the kernels of kernels/embedding.cu in sequence on
 * the stream (keys, a stable radix sort by id, one pass over the runs of equal ids), so each
 * d_table element sums its tokens in token order without float atomics. The sort's buffers
 * (keys and token indices twice, and the digit histogram) are one workspace per stream,
 * allocated from the handle's accounted memory and grown when a call needs more. */
#include <stdlib.h>
#include <string.h>

#include "cuda_kernel_call.h"
#include "cuda_launch_config.h"
#include "dataflow/op_args.h"

#define FILE_ "embedding.cu"
#define RADIX_BITS 8
#define RADIX_TILE 2048 /* kernels/embedding.cu: RADIX_THREADS * RADIX_ITEMS */

typedef struct {
	Dataflow_Handle *handle;
	Cuda_Kernel keys, histogram, scan, scatter, rows;
	pthread_mutex_t lock; /* guards the workspaces */
	void *ws[DATAFLOW_MAX_STREAMS];
	uint64_t ws_bytes[DATAFLOW_MAX_STREAMS];
} Embedding_State;

static void state_destroy(void *data)
{
	Embedding_State *s = data;
	for (int i = 0; i < DATAFLOW_MAX_STREAMS; i++)
		if (s->ws[i])
			dataflow_free_mem(s->handle, s->ws[i]);
	Cuda_Kernel *k[] = {&s->keys, &s->histogram, &s->scan, &s->scatter, &s->rows};
	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++)
		cuda_kernel_destroy(k[i]);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

Dataflow_Status dataflow_cuda_embedding_bwd_w_init(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
						   Dataflow_Op_State *state)
{
	Embedding_State *s = calloc(1, sizeof(*s));
	if (!s)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "embedding_bwd_w: no memory");
	s->handle = handle;
	DataflowDatatype id = skeleton->arg_dtypes[DATAFLOW_EMBEDDING_BWD_W_ARG_IDS];
	DataflowDatatype dt = skeleton->arg_dtypes[DATAFLOW_EMBEDDING_BWD_W_ARG_D_OUT];
	cuda_kernel_init(&s->keys, FILE_, id == DATAFLOW_INT64 ? "embedding_bwd_keys_int64" : "embedding_bwd_keys_int32");
	cuda_kernel_init(&s->histogram, FILE_, "radix_histogram");
	cuda_kernel_init(&s->scan, FILE_, "radix_scan");
	cuda_kernel_init(&s->scatter, FILE_, "radix_scatter");
	cuda_kernel_init(&s->rows, FILE_,
			 dt == DATAFLOW_FP32   ? "embedding_bwd_rows_fp32"
			 : dt == DATAFLOW_FP16 ? "embedding_bwd_rows_fp16"
					       : "embedding_bwd_rows_bf16");
	pthread_mutex_init(&s->lock, NULL);
	state->data = s;
	state->destroy = state_destroy;
	return DATAFLOW_OK;
}

/* The stream's workspace of at least bytes (called with s->lock held). */
static Dataflow_Status workspace(Embedding_State *s, int stream_id, uint64_t bytes, void **ws)
{
	if (s->ws_bytes[stream_id] < bytes) {
		if (s->ws[stream_id])
			dataflow_free_mem(s->handle, s->ws[stream_id]); /* released once queued work is past it */
		s->ws[stream_id] = NULL;
		s->ws_bytes[stream_id] = 0;
		Dataflow_Status st = dataflow_alloc_mem(s->handle, bytes, &s->ws[stream_id]);
		if (st != DATAFLOW_OK)
			return st;
		s->ws_bytes[stream_id] = bytes;
	}
	*ws = s->ws[stream_id];
	return DATAFLOW_OK;
}

/* Passes of RADIX_BITS over keys in [0, vocab]. */
static int radix_passes(int64_t vocab)
{
	int bits = 0;
	while (bits < 31 && (vocab >> bits) != 0)
		bits++;
	return (bits + RADIX_BITS - 1) / RADIX_BITS;
}

Dataflow_Status dataflow_cuda_embedding_bwd_w(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state)
{
	Embedding_State *s = op_state;
	Cuda_Handle *h = cuda_of(handle);
	Dataflow_Embedding_Bwd_W_Args a = dataflow_embedding_bwd_w_args(op->op_args);
	if (a.num_tokens > 0x3fffffff || a.vocab > 0x3fffffff)
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "embedding_bwd_w: num_tokens and vocab must be < 2^30 on cuda, got %lld and %lld",
					  (long long)a.num_tokens, (long long)a.vocab);
	int n = (int)a.num_tokens, tiles = (n + RADIX_TILE - 1) / RADIX_TILE, hist_n = tiles << RADIX_BITS;
	uint64_t bytes = (uint64_t)4 * (4 * (uint64_t)n + (uint64_t)hist_n);
	pthread_mutex_lock(&s->lock);
	void *ws = NULL;
	Dataflow_Status st = workspace(s, stream_id, bytes, &ws);
	int *key[2] = {(int *)ws, (int *)ws + n}, *val[2] = {(int *)ws + 2 * n, (int *)ws + 3 * n};
	int *hist = (int *)ws + 4 * n;
	long long tokens = a.num_tokens, vocab = a.vocab, hidden = a.hidden;
	if (st == DATAFLOW_OK) {
		void *args[] = {&tokens, &vocab, (void *)&a.ids, &key[0], &val[0]};
		Dataflow_Launch_Config c;
		cuda_elementwise_config(tokens, &c);
		st = cuda_kernel_launch(h, stream_id, &s->keys, c.grid[0], 1, c.block[0], 0, args);
	}
	int cur = 0;
	for (int pass = 0, passes = radix_passes(a.vocab); pass < passes && st == DATAFLOW_OK; pass++, cur ^= 1) {
		int shift = pass * RADIX_BITS;
		void *hargs[] = {&key[cur], &n, &shift, &tiles, &hist};
		st = cuda_kernel_launch(h, stream_id, &s->histogram, (uint32_t)tiles, 1, 256, 0, hargs);
		void *sargs[] = {&hist, &hist_n};
		if (st == DATAFLOW_OK)
			st = cuda_kernel_launch(h, stream_id, &s->scan, 1, 1, 1024, 0, sargs);
		void *xargs[] = {&key[cur], &val[cur], &n, &shift, &tiles, &hist, &key[cur ^ 1], &val[cur ^ 1]};
		if (st == DATAFLOW_OK)
			st = cuda_kernel_launch(h, stream_id, &s->scatter, (uint32_t)tiles, 1, 256, 0, xargs);
	}
	if (st == DATAFLOW_OK) {
		Dataflow_Launch_Config c;
		cuda_columns_config(a.hidden, 1, &c);
		uint32_t gx = (uint32_t)(n < CUDA_MAX_GRID ? n : CUDA_MAX_GRID);
		void *args[] = {&n, &hidden, &vocab, &key[cur], &val[cur], (void *)&a.d_out, (void *)&a.d_table};
		if (c.grid[0] > 65535)
			st = dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED, "embedding_bwd_w: hidden too large on cuda: %lld",
						(long long)a.hidden);
		else /* grid (positions, column groups) */
			st = cuda_kernel_launch(h, stream_id, &s->rows, gx, c.grid[0], c.block[0], 0, args);
	}
	pthread_mutex_unlock(&s->lock);
	return st;
}
