// embedding:       out[t, :] = table[ids[t], :]        (a zero row when ids[t] is outside [0, vocab))
// embedding_bwd_w: d_table[ids[t], :] += d_out[t, :]   (out-of-range ids skipped)
// The forward is a row copy, one block per token row (16-byte vectors when aligned).
// The backward must sum each d_table element's tokens in token order, in fp32, one add per
// token (the host's contract), with no float atomics. The external op (cuda_embedding.c)
// runs these kernels on the stream:
//   1. embedding_bwd_keys:    key[t] = ids[t] if in range, else vocab;  val[t] = t
//   2. a stable LSD radix sort of (key, val) by key, 8 bits per pass:
//        radix_histogram -> radix_scan -> radix_scatter
//      so equal ids end up adjacent with their tokens in increasing order;
//   3. embedding_bwd_rows: the first position p of each run of equal keys owns row key[p]
//      and, per column, adds d_out[val[q], c] for the run's q in order to d_table[key[p], c].
// Every element's sum is then one fixed sequence of fp32 adds: the host's bits, whatever the
// launch geometry.
#include "dtype.cuh"
#include "op_params.cuh"

#define RADIX_BITS 8
#define RADIX 256
#define RADIX_THREADS 256
#define RADIX_ITEMS 8
#define RADIX_TILE (RADIX_THREADS * RADIX_ITEMS)

// ---- forward ----

template <class D, class I>
__device__ void embedding(long long num_tokens, long long hidden, long long vocab, const I *ids,
			  const typename D::T *table, typename D::T *out)
{
	typedef Vec<D> V;
	const bool vec = vec_ok<D>(hidden, table, out);
	for (long long t = blockIdx.x; t < num_tokens; t += gridDim.x) {
		const long long id = (long long)ids[t];
		const bool valid = id >= 0 && id < vocab;
		const typename D::T *src = table + (valid ? id : 0) * hidden;
		typename D::T *dst = out + t * hidden;
		if (vec) {
			for (long long j = threadIdx.x * V::N; j < hidden; j += blockDim.x * V::N) {
				V v;
				if (valid)
					v.load(src + j);
				else
					v.raw = make_uint4(0, 0, 0, 0);
				v.store(dst + j);
			}
		} else {
			for (long long j = threadIdx.x; j < hidden; j += blockDim.x)
				dst[j] = valid ? src[j] : D::store(0.0f);
		}
	}
}

#define EMBEDDING(DT, TAG, ID, ID_T)                                                                     \
	extern "C" __global__ void dataflow_cuda_embedding_##DT##_##ID(DATAFLOW_EMBEDDING_PARAMS(ID_T, DT##_t)) \
	{                                                                                                \
		embedding<TAG, ID_T>(num_tokens, hidden, vocab, ids, table, out);                          \
	}

EMBEDDING(fp32, Fp32, int32, int)
EMBEDDING(fp32, Fp32, int64, long long)
EMBEDDING(fp16, Fp16, int32, int)
EMBEDDING(fp16, Fp16, int64, long long)
EMBEDDING(bf16, Bf16, int32, int)
EMBEDDING(bf16, Bf16, int64, long long)

// ---- backward: keys ----

template <class I> __device__ void bwd_keys(long long num_tokens, long long vocab, const I *ids, int *key, int *val)
{
	FOR_EACH_INDEX(t, num_tokens)
	{
		const long long id = (long long)ids[t];
		key[t] = id >= 0 && id < vocab ? (int)id : (int)vocab;
		val[t] = (int)t;
	}
}

extern "C" __global__ void embedding_bwd_keys_int32(long long num_tokens, long long vocab, const int *ids, int *key,
						    int *val)
{
	bwd_keys(num_tokens, vocab, ids, key, val);
}

extern "C" __global__ void embedding_bwd_keys_int64(long long num_tokens, long long vocab, const long long *ids,
						    int *key, int *val)
{
	bwd_keys(num_tokens, vocab, ids, key, val);
}

// ---- backward: stable LSD radix sort of (key, val) by key ----
// Tile b holds elements [b * RADIX_TILE, (b + 1) * RADIX_TILE). hist is digit-major:
// hist[d * tiles + b] = how many of tile b's keys have digit d; after radix_scan it holds the
// position of tile b's first element with digit d in the pass's output.

extern "C" __global__ void __launch_bounds__(RADIX_THREADS) radix_histogram(const int *key, int n, int shift, int tiles,
									    int *hist)
{
	__shared__ int count[RADIX];
	count[threadIdx.x] = 0; // RADIX_THREADS == RADIX
	__syncthreads();
	const int base = blockIdx.x * RADIX_TILE;
	for (int k = 0; k < RADIX_ITEMS; k++) {
		int i = base + k * RADIX_THREADS + threadIdx.x;
		if (i < n)
			atomicAdd(&count[(key[i] >> shift) & (RADIX - 1)], 1); // integer counts: exact
	}
	__syncthreads();
	hist[threadIdx.x * tiles + blockIdx.x] = count[threadIdx.x];
}

// Exclusive prefix sum of hist[0, n) in place, by one block of 1024 threads: each thread scans
// a contiguous chunk, the chunk totals are scanned across the block, then added back.
extern "C" __global__ void __launch_bounds__(1024) radix_scan(int *hist, int n)
{
	__shared__ int warp_total[32];
	const int chunk = (n + 1023) / 1024, lo = threadIdx.x * chunk, hi = min(lo + chunk, n);
	int total = 0;
	for (int i = lo; i < hi; i++)
		total += hist[i];
	// block-wide exclusive scan of total
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	int inc = total;
	for (int o = 1; o < 32; o <<= 1) {
		int v = __shfl_up_sync(0xffffffffu, inc, o);
		if (lane >= o)
			inc += v;
	}
	if (lane == 31)
		warp_total[warp] = inc;
	__syncthreads();
	if (warp == 0) {
		int w = warp_total[lane], winc = w;
		for (int o = 1; o < 32; o <<= 1) {
			int v = __shfl_up_sync(0xffffffffu, winc, o);
			if (lane >= o)
				winc += v;
		}
		warp_total[lane] = winc - w; // exclusive prefix of the warps' totals
	}
	__syncthreads();
	int run = warp_total[warp] + inc - total;
	for (int i = lo; i < hi; i++) {
		int c = hist[i];
		hist[i] = run;
		run += c;
	}
}

// Writes tile b's elements to their sorted positions, stably: elements are ranked in index
// order, round by round (RADIX_THREADS elements each), warp by warp within a round, lane by
// lane within a warp (__match_any_sync groups a warp's lanes by digit).
extern "C" __global__ void __launch_bounds__(RADIX_THREADS) radix_scatter(const int *key_in, const int *val_in, int n,
									  int shift, int tiles, const int *hist,
									  int *key_out, int *val_out)
{
	enum { WARPS = RADIX_THREADS / 32 };
	__shared__ int offset[RADIX];        // next output position per digit, for this tile
	__shared__ int warp_base[WARPS][RADIX]; // per round: digit counts per warp, then their prefix
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	offset[threadIdx.x] = hist[threadIdx.x * tiles + blockIdx.x];
	const int base = blockIdx.x * RADIX_TILE;
	for (int k = 0; k < RADIX_ITEMS; k++) {
		for (int w = 0; w < WARPS; w++)
			warp_base[w][threadIdx.x] = 0;
		__syncthreads();
		const int i = base + k * RADIX_THREADS + threadIdx.x;
		const bool valid = i < n;
		const int kv = valid ? key_in[i] : 0;
		const int digit = valid ? (kv >> shift) & (RADIX - 1) : RADIX; // RADIX: matches only the invalid
		const unsigned peers = __match_any_sync(0xffffffffu, digit);
		const int rank = __popc(peers & ((1u << lane) - 1));
		if (valid && rank == 0)
			warp_base[warp][digit] = __popc(peers);
		__syncthreads();
		{ // thread d turns digit d's per-warp counts into positions
			int run = offset[threadIdx.x];
			for (int w = 0; w < WARPS; w++) {
				int c = warp_base[w][threadIdx.x];
				warp_base[w][threadIdx.x] = run;
				run += c;
			}
			offset[threadIdx.x] = run;
		}
		__syncthreads();
		if (valid) {
			const int pos = warp_base[warp][digit] + rank;
			key_out[pos] = kv;
			val_out[pos] = val_in[i];
		}
		__syncthreads(); // warp_base is cleared next round
	}
}

// ---- backward: runs of equal keys -> rows of d_table ----
// grid (positions, column chunks of blockDim.x); position p starts a run if p == 0 or its key
// differs from the previous one. Keys equal to vocab mark skipped tokens.
template <class D>
__device__ void bwd_rows(int num_tokens, long long hidden, long long vocab, const int *key, const int *val,
			 const typename D::T *d_out, float *d_table)
{
	for (long long p = blockIdx.x; p < num_tokens; p += gridDim.x) {
		const int id = key[p];
		if ((p > 0 && key[p - 1] == id) || id >= vocab)
			continue;
		const long long c = (long long)blockIdx.y * blockDim.x + threadIdx.x;
		if (c >= hidden)
			continue;
		float acc = d_table[id * hidden + c];
		for (long long q = p; q < num_tokens && key[q] == id; q++)
			acc += D::load(d_out[(long long)val[q] * hidden + c]);
		d_table[id * hidden + c] = acc;
	}
}

#define EMBEDDING_BWD_ROWS(DT, TAG)                                                                      \
	extern "C" __global__ void embedding_bwd_rows_##DT(int num_tokens, long long hidden, long long vocab, \
							   const int *key, const int *val, const DT##_t *d_out, \
							   float *d_table)                                      \
	{                                                                                                \
		bwd_rows<TAG>(num_tokens, hidden, vocab, key, val, d_out, d_table);                        \
	}

EMBEDDING_BWD_ROWS(fp32, Fp32)
EMBEDDING_BWD_ROWS(fp16, Fp16)
EMBEDDING_BWD_ROWS(bf16, Bf16)
