/* Portable host matmul, used when oneDNN is absent, has no implementation for a dtype
 * combination (fp16 on CPUs without AVX512-FP16), or DATAFLOW_HOST_MATMUL=fallback.
 *
 *   D[m][n] = alpha * sum_k op(A)[m][k] * op(B)[k][n] + beta * C[m][n],  fp32 accumulation
 *
 * GotoBLAS-style: op(B) is packed NC columns at a time into fp32 panels of NR columns
 * (k-major), op(A) MC rows at a time into fp32 panels of MR rows, converting bf16/fp16 while
 * packing; an MR x NR register-blocked microkernel then runs over the whole K. There is no K
 * blocking: per k step the AVX-512 kernel reads 176 bytes of panels for 24 FMAs, well within
 * what L2/L3 deliver, and keeping all of K in registers means every output is rounded to
 * out_dtype exactly once.
 *
 * Threads: pthreads, started per call (the calling stream worker is thread 0). Each NC chunk
 * is packed by all threads together, then (MC-row block x column range) items are dealt out
 * round-robin. Thread count: the handle's (as for oneDNN's team). Small problems run on the
 * caller alone.
 *
 * Workspace: one buffer kept in the state, grown under the state lock to the largest call
 * seen (packed B chunk: K x NC floats; per thread: an MC x K A block and a K-float row). */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "matmul.h"
#include "simd.h"

enum {
	MC = 96,   /* rows of op(A) packed per block: a multiple of every MR */
	NC = 1024, /* columns of op(B) packed per chunk: a multiple of every NR */
	MAX_MR = 12,
	MAX_NR = 32,
	FLOAT_ALIGN = 16 /* 64-byte alignment, in floats */
};
/* Below this many flops, starting threads (tens of microseconds) costs more than it saves. */
#define PARALLEL_MIN_FLOPS (1 << 23)

/* tile[i][j] = sum_k a[k][i] * b[k][j] for packed panels a (K x MR) and b (K x NR). */
typedef void (*Microkernel)(int64_t K, const float *restrict a, const float *restrict b, float *restrict tile);

typedef struct {
	Microkernel fn;
	int mr, nr;
} Kernel;

struct Matmul_Fallback {
	Kernel kernel;
	int num_threads;
	pthread_mutex_t lock; /* one call at a time: guards the workspace */
	float *workspace;
	size_t workspace_floats;
};

/* ---- microkernels: AVX-512 12x32, AVX2 6x16, scalar 4x16 (autovectorized) ---- */

/* The vector tile is MR rows by 2 vectors: 2 MR accumulators, the 2 vectors of b and the
 * broadcast of a fit the 32 zmm / 16 ymm registers. */
enum { MR_avx512 = 12, MR_avx2 = 6 };

#define MICROKERNEL(isa)                                                                             \
	SIMD_TARGET_##isa static void microkernel_##isa(int64_t K, const float *restrict a, const float *restrict b, \
							float *restrict tile)                                \
	{                                                                                            \
		Vf_##isa acc[MR_##isa][2];                                                           \
		_Pragma("GCC unroll 12") for (int i = 0; i < MR_##isa; i++)                          \
			acc[i][0] = acc[i][1] = vset1_##isa(0.0f);                                   \
		for (int64_t k = 0; k < K; k++, a += MR_##isa, b += 2 * VL_##isa) {                  \
			Vf_##isa b0 = vloadf_##isa(b), b1 = vloadf_##isa(b + VL_##isa);              \
			_Pragma("GCC unroll 12") for (int i = 0; i < MR_##isa; i++) {                \
				Vf_##isa ai = vset1_##isa(a[i]);                                     \
				acc[i][0] = vfma_##isa(ai, b0, acc[i][0]);                           \
				acc[i][1] = vfma_##isa(ai, b1, acc[i][1]);                           \
			}                                                                            \
		}                                                                                    \
		_Pragma("GCC unroll 12") for (int i = 0; i < MR_##isa; i++) {                        \
			vstoref_##isa(tile + i * 2 * VL_##isa, acc[i][0]);                           \
			vstoref_##isa(tile + i * 2 * VL_##isa + VL_##isa, acc[i][1]);                \
		}                                                                                    \
	}
SIMD_EACH_ISA(MICROKERNEL)

static void microkernel_scalar(int64_t K, const float *restrict a, const float *restrict b, float *restrict tile)
{
	float acc[4][16] = {{0}};
	for (int64_t k = 0; k < K; k++, a += 4, b += 16)
		for (int i = 0; i < 4; i++)
			for (int j = 0; j < 16; j++)
				acc[i][j] += a[i] * b[j];
	memcpy(tile, acc, sizeof(acc));
}

/* The widest microkernel simd_level() allows (DATAFLOW_SIMD=scalar|avx2 caps it, for tests). */
static Kernel kernel_select(void)
{
	switch (simd_level()) {
	case SIMD_AVX512:
		return (Kernel){microkernel_avx512, MR_avx512, 2 * VL_avx512};
	case SIMD_AVX2:
		return (Kernel){microkernel_avx2, MR_avx2, 2 * VL_avx2};
	default:
		return (Kernel){microkernel_scalar, 4, 16};
	}
}

/* ---- packing and the output tile ---- */

/* n elements of dtype at src -> fp32 at dst (and back): the dtypes are validated upstream,
 * so dataflow_convert cannot fail here. */
static void to_fp32(float *dst, const void *src, DataflowDatatype dtype, int64_t n)
{
	if (dtype == DATAFLOW_FP32)
		memcpy(dst, src, (size_t)n * sizeof(float));
	else
		dataflow_convert(DATAFLOW_FP32, dst, dtype, src, (size_t)n);
}

static void from_fp32(void *dst, DataflowDatatype dtype, const float *src, int64_t n)
{
	if (dtype == DATAFLOW_FP32)
		memcpy(dst, src, (size_t)n * sizeof(float));
	else
		dataflow_convert(dtype, dst, DATAFLOW_FP32, src, (size_t)n);
}

/* dst[k][l] = X[k * stride_k + l * stride_l] for k < K, l < w, zero for w <= l < R: one
 * R-wide panel of op(A) (R = MR) or op(B) (R = NR) as fp32. One stride is 1: either each
 * k-row of the panel is contiguous in X and converted straight into dst, or each line l is,
 * and it is converted into tmp (K floats) and scattered with stride R. */
static void pack_panel(float *dst, const char *x, DataflowDatatype dtype, int64_t K, int w, int R,
		       int64_t stride_k, int64_t stride_l, float *tmp)
{
	size_t es = dataflow_datatype_size(dtype);
	if (stride_l == 1) {
		for (int64_t k = 0; k < K; k++) {
			to_fp32(dst + k * R, x + (size_t)(k * stride_k) * es, dtype, w);
			memset(dst + k * R + w, 0, (size_t)(R - w) * sizeof(float));
		}
		return;
	}
	for (int l = 0; l < R; l++) {
		if (l < w)
			to_fp32(tmp, x + (size_t)(l * stride_l) * es, dtype, K);
		for (int64_t k = 0; k < K; k++)
			dst[k * R + l] = l < w ? tmp[k] : 0.0f;
	}
}

/* D[i0 + i][j0 + j] = alpha * tile[i][j] + beta * C[i0 + i][j0 + j] for i < rows, j < cols. */
static void store_tile(const Matmul_Args *x, const float *tile, int nr, int64_t i0, int64_t j0, int rows, int cols)
{
	size_t es = dataflow_datatype_size(x->out_dtype);
	float row[MAX_NR];
	for (int i = 0; i < rows; i++) {
		size_t offset = (size_t)((i0 + i) * x->N + j0) * es;
		if (x->beta != 0.0f) {
			to_fp32(row, (const char *)x->C + offset, x->out_dtype, cols);
			for (int j = 0; j < cols; j++)
				row[j] = x->alpha * tile[i * nr + j] + x->beta * row[j];
		} else {
			for (int j = 0; j < cols; j++)
				row[j] = x->alpha * tile[i * nr + j];
		}
		from_fp32((char *)x->D + offset, x->out_dtype, row, cols);
	}
}

/* ---- the threaded driver ---- */

typedef struct {
	const Matmul_Args *args;
	const Kernel *kernel;
	int num_threads;
	float *b_pack;             /* K x NC chunk of op(B), shared */
	float *thread_ws;          /* per thread: A block (MC x K) then tmp row (K) */
	size_t thread_ws_floats;
	pthread_mutex_t gate;      /* held by the caller until num_threads and barrier are set */
	pthread_barrier_t barrier; /* between packing a chunk, using it, and packing the next */
} Job;

typedef struct {
	Job *job;
	int tid;
} Worker;

static size_t round_up(size_t n, size_t align) { return (n + align - 1) / align * align; }

static void *worker_run(void *arg)
{
	const Worker *w = arg;
	Job *job = w->job;
	pthread_mutex_lock(&job->gate);
	pthread_mutex_unlock(&job->gate);
	const Matmul_Args *x = job->args;
	const int mr = job->kernel->mr, nr = job->kernel->nr, T = job->num_threads, t = w->tid;
	const int64_t M = x->M, N = x->N, K = x->K;
	const size_t es = dataflow_datatype_size(x->in_dtype);
	/* element strides of op(A) (m, k) and op(B) (k, n) in their stored layouts */
	const int64_t a_sm = x->trans_a ? 1 : K, a_sk = x->trans_a ? M : 1;
	const int64_t b_sk = x->trans_b ? 1 : N, b_sn = x->trans_b ? K : 1;
	float *a_pack = job->thread_ws + (size_t)t * job->thread_ws_floats;
	float *tmp = a_pack + round_up((size_t)MC * K, FLOAT_ALIGN);
	float tile[MAX_MR * MAX_NR] __attribute__((aligned(64)));

	for (int64_t jc = 0; jc < N; jc += NC) {
		int64_t nc = N - jc < NC ? N - jc : NC;
		int64_t panels = (nc + nr - 1) / nr;
		for (int64_t p = t; p < panels; p += T) {
			int64_t j0 = jc + p * nr;
			int cols = (int)(N - j0 < nr ? N - j0 : nr);
			pack_panel(job->b_pack + p * K * nr, (const char *)x->B + (size_t)(j0 * b_sn) * es, x->in_dtype,
				   K, cols, nr, b_sk, b_sn, tmp);
		}
		pthread_barrier_wait(&job->barrier);

		/* Items: an MC-row block times one of `split` column ranges of the chunk; splitting
		 * columns keeps every thread busy when M has fewer blocks than there are threads. */
		int64_t blocks = (M + MC - 1) / MC;
		int64_t split = (T + blocks - 1) / blocks;
		if (split > panels)
			split = panels;
		for (int64_t item = t; item < blocks * split; item += T) {
			int64_t i0 = item / split * MC, s = item % split;
			int64_t mc = M - i0 < MC ? M - i0 : MC;
			for (int64_t r = 0; r < mc; r += mr) {
				int h = (int)(mc - r < mr ? mc - r : mr);
				pack_panel(a_pack + r * K, (const char *)x->A + (size_t)((i0 + r) * a_sm) * es,
					   x->in_dtype, K, h, mr, a_sk, a_sm, tmp);
			}
			for (int64_t p = panels * s / split; p < panels * (s + 1) / split; p++) {
				int64_t j0 = jc + p * nr;
				int cols = (int)(N - j0 < nr ? N - j0 : nr);
				for (int64_t r = 0; r < mc; r += mr) {
					job->kernel->fn(K, a_pack + r * K, job->b_pack + p * K * nr, tile);
					store_tile(x, tile, nr, i0 + r, j0, (int)(mc - r < mr ? mc - r : mr), cols);
				}
			}
		}
		pthread_barrier_wait(&job->barrier);
	}
	return NULL;
}

/* Grows fb->workspace to at least n floats; the caller holds fb->lock. */
static Dataflow_Status workspace_reserve(Matmul_Fallback *fb, size_t n)
{
	if (n <= fb->workspace_floats)
		return DATAFLOW_OK;
	free(fb->workspace);
	fb->workspace_floats = 0;
	fb->workspace = aligned_alloc(64, round_up(n * sizeof(float), 64));
	if (!fb->workspace)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
					  "host matmul fallback: cannot allocate a %zu-byte workspace", n * sizeof(float));
	fb->workspace_floats = n;
	return DATAFLOW_OK;
}

static Dataflow_Status run_locked(Matmul_Fallback *fb, const Matmul_Args *x)
{
	double flops = 2.0 * (double)x->M * (double)x->N * (double)x->K;
	int T = flops < PARALLEL_MIN_FLOPS ? 1 : x->num_threads;
	const int nr = fb->kernel.nr;
	int64_t nc = x->N < NC ? x->N : NC;
	size_t b_floats = round_up((size_t)((nc + nr - 1) / nr * nr * x->K), FLOAT_ALIGN);
	size_t thread_floats = round_up((size_t)MC * x->K, FLOAT_ALIGN) + round_up((size_t)x->K, FLOAT_ALIGN);
	Dataflow_Status st = workspace_reserve(fb, b_floats + (size_t)T * thread_floats);
	if (st != DATAFLOW_OK)
		return st;

	Job job = {.args = x, .kernel = &fb->kernel, .b_pack = fb->workspace, .thread_ws = fb->workspace + b_floats,
		   .thread_ws_floats = thread_floats};
	/* Workers wait at the gate until the barrier is sized for the threads that did start
	 * (a failed pthread_create only means fewer threads). */
	pthread_mutex_init(&job.gate, NULL);
	pthread_mutex_lock(&job.gate);
	Worker workers[T];
	pthread_t threads[T];
	int started = 1;
	for (; started < T; started++) {
		workers[started] = (Worker){&job, started};
		if (pthread_create(&threads[started], NULL, worker_run, &workers[started]) != 0)
			break;
	}
	job.num_threads = started;
	pthread_barrier_init(&job.barrier, NULL, (unsigned)started);
	pthread_mutex_unlock(&job.gate);
	workers[0] = (Worker){&job, 0};
	worker_run(&workers[0]);
	for (int i = 1; i < started; i++)
		pthread_join(threads[i], NULL);
	pthread_mutex_destroy(&job.gate);
	pthread_barrier_destroy(&job.barrier);
	return DATAFLOW_OK;
}

Dataflow_Status matmul_fallback_run(Matmul_Fallback *fb, const Matmul_Args *args)
{
	pthread_mutex_lock(&fb->lock);
	Dataflow_Status st = run_locked(fb, args);
	pthread_mutex_unlock(&fb->lock);
	return st;
}

Dataflow_Status matmul_fallback_create(Matmul_Fallback **fallback)
{
	Matmul_Fallback *fb = calloc(1, sizeof(*fb));
	if (!fb)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "host matmul fallback: out of host memory");
	fb->kernel = kernel_select();
	pthread_mutex_init(&fb->lock, NULL);
	*fallback = fb;
	return DATAFLOW_OK;
}

void matmul_fallback_destroy(Matmul_Fallback *fb)
{
	if (!fb)
		return;
	pthread_mutex_destroy(&fb->lock);
	free(fb->workspace);
	free(fb);
}
