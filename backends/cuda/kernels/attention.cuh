// Shared device code of the attention kernels (attention.cu, attention_bwd.cu): sequences,
// shared-memory tiles, and the sm_80 tensor-core primitives (mma.sync m16n8k16 with fp32
// accumulation, ldmatrix, cp.async).
//
// Fragments of mma.m16n8k16 (g = lane / 4, t = lane % 4; a register holds 2 16-bit values):
//   A 16x16 row-major: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B 16x8 (k x n):    b0 (k = 2t..2t+1, n = g), b1 (k = 2t+8.., n = g)
//   C 16x8 fp32:       c0, c1 (g, 2t..2t+1), c2, c3 (g+8, 2t..2t+1)
// Two C tiles side by side (columns 16c..16c+15) are, packed to 16 bits, exactly the A
// fragment of k-chunk c: P = softmax(S) feeds the next product without leaving registers.
//
// Tiles in shared memory are [rows][HD] 16-bit elements, HD in {64, 128, 256}, with the
// 16-byte chunk index XOR-swizzled by (row % 8): the 8 rows an ldmatrix phase reads hit 8
// different bank groups.
#pragma once

#include "attention_params.cuh"
#include "dtype.cuh"

#define ATTN_LOG2E 1.44269504088896340736f
#define ATTN_LN2 0.69314718055994530942f
#define ATTN_INF __int_as_float(0x7f800000)

typedef unsigned int u32;
typedef unsigned long long u64;

// ---- sequences: cu_seqlens is untrusted device data ----
// With c_i = clamp(cu[i], 0, total) and M_i = max(c_0 .. c_i), sequence s covers
// [M_s, M_{s+1}): the host cursor's rule (each range starts no earlier than the previous one
// ended), so any content gives disjoint in-bounds ranges. Each sequence is cut into blocks
// of B tokens, numbered globally in sequence order.

__device__ __forceinline__ long long attn_clamp(const int *cu, long long i, long long total)
{
	long long c = cu[i];
	return c < 0 ? 0 : c > total ? total : c;
}

struct Seq_Block {
	long long s;      // sequence, or -1 when block g lies past the last one
	long long lo, hi; // its tokens
	long long block;  // block index within it
};

// The sequence holding global block g. Warp-cooperative: every lane calls it with the same
// arguments and gets the same result; 32 sequences per step (max-scan of the offsets, then a
// sum-scan of the block counts).
__device__ Seq_Block attn_find_block(const int *cu, long long num_seqs, long long total, long long B, long long g)
{
	const int lane = threadIdx.x & 31;
	long long m = attn_clamp(cu, 0, total), blocks = 0;
	for (long long base = 0; base < num_seqs; base += 32) {
		const long long s = base + lane;
		const bool live = s < num_seqs;
		long long hi = live ? attn_clamp(cu, s + 1, total) : -1;
		hi = hi > m ? hi : m;
		for (int o = 1; o < 32; o <<= 1) { // hi = M_{s+1}
			long long v = __shfl_up_sync(0xffffffffu, hi, o);
			if (lane >= o && v > hi)
				hi = v;
		}
		long long lo = __shfl_up_sync(0xffffffffu, hi, 1); // M_s
		if (lane == 0)
			lo = m;
		const long long count = live ? (hi - lo + B - 1) / B : 0;
		long long end = count;
		for (int o = 1; o < 32; o <<= 1) {
			long long v = __shfl_up_sync(0xffffffffu, end, o);
			if (lane >= o)
				end += v;
		}
		end += blocks; // blocks of sequences 0 .. s
		const u32 hit = __ballot_sync(0xffffffffu, live && g < end);
		if (hit) {
			const int first = __ffs(hit) - 1;
			Seq_Block r;
			r.s = __shfl_sync(0xffffffffu, s, first);
			r.lo = __shfl_sync(0xffffffffu, lo, first);
			r.hi = __shfl_sync(0xffffffffu, hi, first);
			r.block = g - (__shfl_sync(0xffffffffu, end, first) - __shfl_sync(0xffffffffu, count, first));
			return r;
		}
		m = __shfl_sync(0xffffffffu, hi, 31);
		blocks = __shfl_sync(0xffffffffu, end, 31);
	}
	Seq_Block none = {-1, 0, 0, 0};
	return none;
}

// A tile's diagonal offset clamped to +-bound (past it every column compares alike).
__device__ __forceinline__ int clamp_diag(long long d, int bound)
{
	return d < -bound ? -bound : d > bound ? bound : (int)d;
}

// The first key that queries from key position p0 on read under a sliding window w > 0 (they
// see keys j > position - w): the start of the block of B keys from klo that holds p0 - w + 1.
// The blocks wholly before it are skipped (the point of a window: less work).
__device__ __forceinline__ long long attn_window_start(long long klo, long long p0, long long w, int B)
{
	const long long first = p0 - w + 1 - klo;
	return w > 0 && first > 0 ? klo + first / B * B : klo;
}

// The query block a tensor-core block handles: in reverse for causal attention, whose last
// query blocks see the most keys, so the longest blocks start first and the short ones fill
// the tail instead of one long block running alone at the end.
__device__ __forceinline__ long long attn_query_block(const Attn_Params &p)
{
	return p.causal ? (long long)gridDim.x - 1 - blockIdx.x : (long long)blockIdx.x;
}

// Tokens [M_s, M_{s+1}) of sequence s of another offsets array (attention_kv's keys), warp-
// cooperative.
__device__ void attn_seq_range(const int *cu, long long s, long long total, long long &lo, long long &hi)
{
	long long m = 0;
	for (long long i = threadIdx.x & 31; i <= s; i += 32) {
		long long c = attn_clamp(cu, i, total);
		m = c > m ? c : m;
	}
	for (int o = 16; o > 0; o >>= 1) {
		long long v = __shfl_xor_sync(0xffffffffu, m, o);
		m = v > m ? v : m;
	}
	lo = m;
	long long c = attn_clamp(cu, s + 1, total);
	hi = c > m ? c : m;
}

// ---- tensor-core primitives ----

__device__ __forceinline__ u32 smem_addr(const void *p)
{
	return (u32)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], u32 addr)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_trans(u32 (&r)[4], u32 addr)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr));
}

// 16 bytes global -> shared, asynchronously; src_bytes = 0 writes zeros (src is not read)
__device__ __forceinline__ void cp_async16(u32 dst, const void *src, int src_bytes)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit()
{
	asm volatile("cp.async.commit_group;\n" ::);
}

template <int N> __device__ __forceinline__ void cp_async_wait()
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// The matrix unit per 16-bit format: C += A B, and two fp32 values packed (RNE) as A/B data.
template <class D> struct Mma;

#define ATTN_MMA(TAG, PTX)                                                                                \
	template <> struct Mma<TAG> {                                                                     \
		static __device__ __forceinline__ void mma(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) \
		{                                                                                         \
			asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." PTX "." PTX ".f32 {%0, %1, %2, %3}, " \
				     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                      \
				     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                        \
				     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));        \
		}                                                                                         \
		static __device__ __forceinline__ u32 pack(float lo, float hi)                            \
		{                                                                                         \
			u32 r;                                                                            \
			asm("cvt.rn." PTX "x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));         \
			return r;                                                                         \
		}                                                                                         \
	};
ATTN_MMA(Bf16, "bf16")
ATTN_MMA(Fp16, "f16")

// The A fragment of k-step kc from C tiles x[2 kc] and x[2 kc + 1] (a C tile's layout is an A
// fragment's half), rounded to the 16-bit format.
template <class D, int N> __device__ __forceinline__ void c_to_a(u32 (&a)[4], const float (&x)[N][4], int kc)
{
	a[0] = Mma<D>::pack(x[2 * kc][0], x[2 * kc][1]);
	a[1] = Mma<D>::pack(x[2 * kc][2], x[2 * kc][3]);
	a[2] = Mma<D>::pack(x[2 * kc + 1][0], x[2 * kc + 1][1]);
	a[3] = Mma<D>::pack(x[2 * kc + 1][2], x[2 * kc + 1][3]);
}

// ---- swizzled tiles ----

// element offset of (row, col) in a [rows][HD] tile; col a multiple of 8 or any col in a chunk
template <int HD> __device__ __forceinline__ int tile_off(int row, int col)
{
	return row * HD + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

// ldmatrix addresses for this lane:
//   a_addr: the A fragment of rows r0..r0+15, cols c0..c0+15 (non-transposed)
//   b_addr: B fragments of two n8 blocks, rows n0..n0+15 of a [n][k] tile, k cols k0..k0+15:
//           r[0], r[1] = b0, b1 of rows n0..n0+7; r[2], r[3] of rows n0+8..n0+15 (non-transposed)
//   bt_addr: B fragments from a [k][n] tile (k rows k0..k0+15, n cols n0..n0+15), transposed:
//           r[0], r[1] = b0, b1 of cols n0..n0+7; r[2], r[3] of cols n0+8..n0+15
template <int HD> __device__ __forceinline__ u32 a_addr(const u16 *tile, int r0, int c0)
{
	const int lane = threadIdx.x & 31;
	return smem_addr(tile + tile_off<HD>(r0 + (lane & 15), c0 + ((lane >> 4) << 3)));
}

template <int HD> __device__ __forceinline__ u32 b_addr(const u16 *tile, int n0, int k0)
{
	const int lane = threadIdx.x & 31;
	return smem_addr(tile + tile_off<HD>(n0 + (lane & 7) + ((lane >> 4) << 3), k0 + (((lane >> 3) & 1) << 3)));
}

template <int HD> __device__ __forceinline__ u32 bt_addr(const u16 *tile, int k0, int n0)
{
	const int lane = threadIdx.x & 31;
	return smem_addr(tile + tile_off<HD>(k0 + (lane & 7) + (((lane >> 3) & 1) << 3), n0 + ((lane >> 4) << 3)));
}

// Loads rows [t0, t0 + ROWS) of head h of a [tokens][heads][head_dim] tensor into a swizzled
// [ROWS][HD] tile, all NT threads together: rows at or past t_end and columns at or past
// head_dim become zeros. vec: 16-byte cp.async chunks (the caller commits and waits), else
// element loads stored at once.
template <int HD, int ROWS, int NT>
__device__ __forceinline__ void load_tile(u16 *tile, const u16 *x, long long t0, long long t_end, long long heads,
					  long long h, long long head_dim, bool vec)
{
	for (int i = threadIdx.x; i < ROWS * (HD / 8); i += NT) {
		const int r = i / (HD / 8), c = (i % (HD / 8)) * 8;
		const long long t = t0 + r;
		u16 *dst = tile + tile_off<HD>(r, c);
		const u16 *src = x + (t * heads + h) * head_dim + c;
		if (vec) {
			const bool in = t < t_end && c < head_dim;
			cp_async16(smem_addr(dst), in ? (const void *)src : (const void *)x, in ? 16 : 0);
		} else {
			u16 e[8];
			for (int k = 0; k < 8; k++)
				e[k] = t < t_end && c + k < head_dim ? src[k] : (u16)0;
			uint4 v;
			v.x = e[0] | (u32)e[1] << 16;
			v.y = e[2] | (u32)e[3] << 16;
			v.z = e[4] | (u32)e[5] << 16;
			v.w = e[6] | (u32)e[7] << 16;
			*(uint4 *)dst = v;
		}
	}
}

// Stores one C-fragment pair (row, cols col, col + 1) of a 16-bit output row with head_dim
// columns: one 32-bit store when vec (head_dim even and rows aligned), else per element.
template <class D>
__device__ __forceinline__ void store_pair(u16 *row, int col, long long head_dim, float a, float b, bool vec)
{
	if (vec) {
		if (col < head_dim)
			*(u32 *)(row + col) = Mma<D>::pack(a, b);
	} else {
		if (col < head_dim)
			row[col] = D::store(a);
		if (col + 1 < head_dim)
			row[col + 1] = D::store(b);
	}
}

// The kernels' entry points. Each does nothing when p.skip says cuDNN's result stands
// (cuda_attention.c). The SIMT kernels: FN_<dtype> runs FN<Tag> for fp32, fp16 and bf16.
#define ATTN_SIMT_ENTRY(FN, DT, TAG)                                                                      \
	extern "C" __global__ void __launch_bounds__(ATTN_SIMT_WARPS * 32) FN##_##DT(Attn_Params p)        \
	{                                                                                                 \
		if (!(p.skip && *p.skip))                                                                 \
			FN<TAG>(p);                                                                       \
	}
#define ATTN_SIMT_ENTRIES(FN) ATTN_SIMT_ENTRY(FN, fp32, Fp32) ATTN_SIMT_ENTRY(FN, fp16, Fp16) ATTN_SIMT_ENTRY(FN, bf16, Bf16)

// The tensor-core kernels': attn_<KIND>_<bf16|fp16>_<HD> runs
// attn_<KIND>_mma<Tag, HD, template arguments...> with NW warps, MINB blocks per SM.
#define ATTN_MMA_ENTRIES(KIND, HD, NW, MINB, ...)                                                         \
	extern "C" __global__ void __launch_bounds__(NW * 32, MINB) attn_##KIND##_bf16_##HD(Attn_Params p) \
	{                                                                                                 \
		if (!(p.skip && *p.skip))                                                                 \
			attn_##KIND##_mma<Bf16, HD, __VA_ARGS__>(p);                                      \
	}                                                                                                 \
	extern "C" __global__ void __launch_bounds__(NW * 32, MINB) attn_##KIND##_fp16_##HD(Attn_Params p) \
	{                                                                                                 \
		if (!(p.skip && *p.skip))                                                                 \
			attn_##KIND##_mma<Fp16, HD, __VA_ARGS__>(p);                                      \
	}
