/* Shared tile code of the host attention kernels (attention.c, attention_bwd.c).
 *
 * Layout: Q [T][Hq][d], K/V [T][Hkv][d] (T = total_tokens, packed sequences), LSE and the
 * backward's D [Hq][T] fp32. Work is cut in blocks of ATTN_BLOCK tokens per sequence.
 *
 * Scores are computed transposed, S^T[j][i] for key j and query i of a 64 x 64 tile, so that
 * every softmax reduction (max and sum over keys) is an elementwise vector op over the 64
 * queries of a row, and every dot product is summed over the head dimension in order. No
 * horizontal reductions anywhere: the AVX-512, AVX2 and scalar paths (fmaf) perform the same
 * fp32 operations in the same order and give the same bits.
 *
 * Tiles are fp32 and live on the stack, sized for head_dim <= ATTN_MAX_HEAD_DIM: about
 * 280 KiB per thread forward and 560 KiB backward at head_dim 256 (threads have 8 MiB). */
#ifndef DATAFLOW_HOST_KERNELS_ATTENTION_H
#define DATAFLOW_HOST_KERNELS_ATTENTION_H

#include <math.h>

#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "simd.h"

enum {
	ATTN_BLOCK = 64,         /* queries per tile (the vector dimension) and keys per tile */
	ATTN_MAX_HEAD_DIM = 256,
	ATTN_MAX_PARTS = 1024,
};

#define ATTN_LOG2E 1.44269504088896340736f
#define ATTN_LN2 0.69314718055994530942f

/* ---- sequences: cu_seqlens is untrusted device data ---- */

/* Walks the sequences in order, numbering their ATTN_BLOCK-token blocks globally. Offsets
 * are clamped to [0, total] and each range starts no earlier than the previous one ended, so
 * any cu_seqlens content gives disjoint in-bounds ranges (non-monotone ones come out empty). */
typedef struct {
	const int32_t *cu;
	int64_t num_seqs, total;
	int64_t s;      /* current sequence; num_seqs once past the last */
	int64_t lo, hi; /* its tokens [lo, hi) */
	int64_t g0;     /* global index of its first block */
	int64_t end;    /* end of the ranges seen so far */
} Seq_Cursor;

static inline int64_t attn_clamp(int64_t x, int64_t total)
{
	return x < 0 ? 0 : x > total ? total : x;
}

static inline int64_t attn_blocks(int64_t n)
{
	return (n + ATTN_BLOCK - 1) / ATTN_BLOCK;
}

static inline void seq_cursor_load(Seq_Cursor *c)
{
	if (c->s >= c->num_seqs)
		return;
	int64_t lo = attn_clamp(c->cu[c->s], c->total), hi = attn_clamp(c->cu[c->s + 1], c->total);
	c->lo = lo > c->end ? lo : c->end;
	c->hi = hi > c->lo ? hi : c->lo;
	c->end = c->hi;
}

static inline Seq_Cursor seq_cursor(const int32_t *cu, int64_t num_seqs, int64_t total)
{
	Seq_Cursor c = {cu, num_seqs, total, 0, 0, 0, 0, 0};
	seq_cursor_load(&c);
	return c;
}

/* Moves forward to the sequence holding global block g; returns its local block index, or
 * -1 when g is past the last block. g must not decrease between calls. */
static inline int64_t seq_cursor_find(Seq_Cursor *c, int64_t g)
{
	while (c->s < c->num_seqs && g >= c->g0 + attn_blocks(c->hi - c->lo)) {
		c->g0 += attn_blocks(c->hi - c->lo);
		c->s++;
		seq_cursor_load(c);
	}
	return c->s < c->num_seqs ? g - c->g0 : -1;
}

/* Moves forward to sequence s (s must not decrease between calls); for a second array of
 * offsets walked in step with another cursor. */
static inline void seq_cursor_seek(Seq_Cursor *c, int64_t s)
{
	while (c->s < s && c->s < c->num_seqs) {
		c->s++;
		seq_cursor_load(c);
	}
}

/* At most this many blocks over all sequences: ceil(L/B) <= L/B + 1 per non-empty one. */
static inline int64_t attn_max_blocks(int64_t total, int64_t num_seqs)
{
	return total / ATTN_BLOCK + (num_seqs < total ? num_seqs : total);
}

/* Parts are contiguous ranges of items (the result never depends on the split; many small
 * parts let the dynamic part scheduler balance causal blocks of unequal cost). */
static inline int attn_num_parts(int64_t items)
{
	return (int)(items < 1 ? 1 : items > ATTN_MAX_PARTS ? ATTN_MAX_PARTS : items);
}

/* ---- rows in and out of fp32 tiles ---- */

/* dst[i][k] = src row i (n elements of dtype, row stride src_stride elements), zero for
 * n <= k < dp; rows past `rows` up to `pad_rows` are all zero. */
static inline void attn_load_rows(float *dst, int dp, const void *src, int64_t src_stride, DataflowDatatype dtype,
				  int rows, int pad_rows, int n)
{
	size_t es = dataflow_datatype_size(dtype);
	for (int i = 0; i < pad_rows; i++) {
		float *row = dst + (size_t)i * dp;
		int w = i < rows ? n : 0;
		if (w)
			dataflow_convert(DATAFLOW_FP32, row, dtype, (const char *)src + (size_t)i * src_stride * es, n);
		memset(row + w, 0, (size_t)(dp - w) * sizeof(float));
	}
}

/* yt[k][i] = scale * rows[i][k] for i < ATTN_BLOCK (rows: ATTN_BLOCK x dp, zero-padded). */
static inline void attn_transpose(float *restrict yt, const float *restrict rows, int dp, int d, float scale)
{
	for (int k = 0; k < d; k++)
		for (int i = 0; i < ATTN_BLOCK; i++)
			yt[k * ATTN_BLOCK + i] = scale * rows[i * dp + k];
}

/* dst row i = scale * src[i][:n] rounded to dtype, for i < rows. */
static inline void attn_store_rows(void *dst, int64_t dst_stride, DataflowDatatype dtype, const float *src, int dp,
				   int rows, int n, float scale)
{
	size_t es = dataflow_datatype_size(dtype);
	float tmp[ATTN_MAX_HEAD_DIM];
	for (int i = 0; i < rows; i++) {
		for (int k = 0; k < n; k++)
			tmp[k] = scale * src[(size_t)i * dp + k];
		dataflow_convert(dtype, (char *)dst + (size_t)i * dst_stride * es, DATAFLOW_FP32, tmp, n);
	}
}

/* Causal mask of an S^T tile: key kb + j sees query q0 + i only when kb + j <= q0 + i. */
static inline void attn_mask_causal(float *s, int nk, int64_t kb, int64_t q0)
{
	for (int j = 0; j < nk; j++)
		for (int i = 0; i < ATTN_BLOCK; i++)
			if (kb + j > q0 + i)
				s[j * ATTN_BLOCK + i] = -INFINITY;
}

/* Sliding window w > 0 (Mistral's): key kb + j is hidden from query position p0 + i when
 * kb + j <= p0 + i - w. Needed only for tiles with kb <= p0 + ATTN_BLOCK - 1 - w. */
static inline int attn_window_cuts(int64_t w, int64_t kb, int64_t p0)
{
	return w > 0 && kb <= p0 + ATTN_BLOCK - 1 - w;
}

static inline void attn_mask_window(float *s, int nk, int64_t kb, int64_t p0, int64_t w)
{
	for (int j = 0; j < nk; j++)
		for (int i = 0; i < ATTN_BLOCK; i++)
			if (kb + j <= p0 + i - w)
				s[j * ATTN_BLOCK + i] = -INFINITY;
}

/* The first key block (blocks of ATTN_BLOCK from klo) that a query block starting at key
 * position p0 sees: with a window the blocks wholly before p0 - w + 1 are skipped (the point
 * of a window: less work). Key blocks stay aligned to klo, so every kind of work item cuts
 * the keys the same way. */
static inline int64_t attn_window_key_start(int64_t klo, int64_t p0, int64_t w)
{
	int64_t first = p0 - w + 1 - klo;
	return w > 0 && first > 0 ? klo + first / ATTN_BLOCK * ATTN_BLOCK : klo;
}

/* ---- the three vector primitives, one function per SIMD path ----
 *
 * qk:   out[j][i] = sum_k x[j * xs + k] * yt[k][i]       j < nx, i < ATTN_BLOCK, k < d
 * acc:  c[r][col] += sum_k a[r * ars + k * aks] * b[k][col]   r < rows, col < dp, k < nk
 *       (dp a multiple of 16; c and b rows dp floats apart)
 * exp2: s[j][i] = 2^(s[j][i] - sub[i])                    j < rows, i < ATTN_BLOCK
 *
 * Every sum starts at 0 (qk) or at c (acc) and adds one fma per k in k order.
 * exp2: 2^x = 2^n * p(f), n = rint(x), f = x - n in [-1/2, 1/2], p the degree-7 Taylor
 * polynomial of e^(f ln 2) (truncation < 6e-9 relative), Horner with fma: max error about
 * 2 ulp (2.4e-7 relative). x is clamped to -127 first: x < -126.5 (and -inf) gives exactly 0. */

typedef void (*Attn_Qk_Fn)(const float *x, int nx, int64_t xs, const float *yt, int d, float *out);
typedef void (*Attn_Acc_Fn)(float *c, int rows, int dp, const float *a, int64_t ars, int64_t aks, int nk,
			    const float *b);
typedef void (*Attn_Exp2_Fn)(float *s, int rows, const float *sub);

typedef struct {
	Attn_Qk_Fn qk;
	Attn_Acc_Fn acc;
	Attn_Exp2_Fn exp2;
} Attn_Tiles;

static const float attn_exp2_poly[8] = {1.0f,
					0.693147180559945309f,
					0.240226506959100712f,
					0.0555041086648215800f,
					0.00961812910762847716f,
					0.00133335581464284434f,
					0.000154035303933816099f,
					1.52527338040598403e-05f};

/* ---- the vector paths: one body per ISA (simd.h) ----
 * Register blocking per ISA: qk keeps ATTN_QK_ROWS rows x ATTN_BLOCK lanes of accumulators (16
 * vectors: all of AVX2's registers, half of AVX-512's, which then also holds the key row); acc
 * updates blocks of up to 4 rows x ATTN_ACC_VECS vectors. Each output element sums over k in
 * order with one fma per term, so every blocking (and the scalar path) gives the same bits. */
enum { ATTN_QK_ROWS_avx512 = 4, ATTN_QK_ROWS_avx2 = 2, ATTN_ACC_VECS_avx512 = 4, ATTN_ACC_VECS_avx2 = 2 };

#define ATTN_TILES_VECTOR(isa)                                                                       \
	/* out[r][i] = sum_k x[r][k] yt[k][i] for R <= ATTN_QK_ROWS rows of x (xs floats apart) */    \
	SIMD_ISA_INLINE(isa)                                                                         \
	void attn_qk_rows_##isa(const float *x, int64_t xs, const float *yt, int d, float *out, const int R) \
	{                                                                                            \
		enum { Q = ATTN_BLOCK / VL_##isa };                                                  \
		Vf_##isa acc[ATTN_QK_ROWS_##isa][Q];                                                 \
		_Pragma("GCC unroll 4") for (int r = 0; r < R; r++) for (int q = 0; q < Q; q++)      \
			acc[r][q] = vset1_##isa(0.0f);                                               \
		for (int k = 0; k < d; k++) {                                                        \
			const float *y = yt + k * ATTN_BLOCK;                                        \
			_Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                          \
			{                                                                            \
				Vf_##isa a = vset1_##isa(x[r * xs + k]);                             \
				_Pragma("GCC unroll 8") for (int q = 0; q < Q; q++)                  \
					acc[r][q] = vfma_##isa(a, vloadf_##isa(y + q * VL_##isa), acc[r][q]); \
			}                                                                            \
		}                                                                                    \
		_Pragma("GCC unroll 4") for (int r = 0; r < R; r++) for (int q = 0; q < Q; q++)      \
			vstoref_##isa(out + r * ATTN_BLOCK + q * VL_##isa, acc[r][q]);                \
	}                                                                                            \
                                                                                                     \
	SIMD_TARGET_##isa static void attn_qk_##isa(const float *x, int nx, int64_t xs, const float *yt, int d, \
						    float *out)                                      \
	{                                                                                            \
		int j = 0;                                                                           \
		for (; j + ATTN_QK_ROWS_##isa <= nx; j += ATTN_QK_ROWS_##isa)                        \
			attn_qk_rows_##isa(x + j * xs, xs, yt, d, out + j * ATTN_BLOCK, ATTN_QK_ROWS_##isa); \
		for (; j < nx; j++)                                                                  \
			attn_qk_rows_##isa(x + j * xs, xs, yt, d, out + j * ATTN_BLOCK, 1);          \
	}                                                                                            \
                                                                                                     \
	/* c[r][col] += sum_k a[r ars + k aks] b[k][col] over R <= 4 rows and C vectors of columns */  \
	SIMD_ISA_INLINE(isa)                                                                         \
	void attn_acc_block_##isa(float *c, int dp, const float *a, int64_t ars, int64_t aks, int nk, const float *b, \
				  const int R, const int C)                                          \
	{                                                                                            \
		Vf_##isa acc[4][ATTN_ACC_VECS_##isa];                                                \
		_Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                  \
			_Pragma("GCC unroll 4") for (int q = 0; q < C; q++)                          \
				acc[r][q] = vloadf_##isa(c + r * dp + q * VL_##isa);                 \
		for (int k = 0; k < nk; k++) {                                                       \
			Vf_##isa bv[ATTN_ACC_VECS_##isa];                                            \
			_Pragma("GCC unroll 4") for (int q = 0; q < C; q++)                          \
				bv[q] = vloadf_##isa(b + (size_t)k * dp + q * VL_##isa);             \
			_Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                          \
			{                                                                            \
				Vf_##isa av = vset1_##isa(a[r * ars + k * aks]);                     \
				_Pragma("GCC unroll 4") for (int q = 0; q < C; q++)                  \
					acc[r][q] = vfma_##isa(av, bv[q], acc[r][q]);                \
			}                                                                            \
		}                                                                                    \
		_Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                  \
			_Pragma("GCC unroll 4") for (int q = 0; q < C; q++)                          \
				vstoref_##isa(c + r * dp + q * VL_##isa, acc[r][q]);                 \
	}                                                                                            \
                                                                                                     \
	/* the columns of R rows: whole blocks of ATTN_ACC_VECS vectors, then single vectors */        \
	SIMD_ISA_INLINE(isa)                                                                         \
	void attn_acc_rows_##isa(float *c, int dp, const float *a, int64_t ars, int64_t aks, int nk, const float *b, \
				 const int R)                                                        \
	{                                                                                            \
		enum { W = ATTN_ACC_VECS_##isa * VL_##isa };                                         \
		int col = 0;                                                                         \
		for (; col + W <= dp; col += W)                                                      \
			attn_acc_block_##isa(c + col, dp, a, ars, aks, nk, b + col, R, ATTN_ACC_VECS_##isa); \
		for (; col < dp; col += VL_##isa)                                                    \
			attn_acc_block_##isa(c + col, dp, a, ars, aks, nk, b + col, R, 1);           \
	}                                                                                            \
                                                                                                     \
	SIMD_TARGET_##isa static void attn_acc_##isa(float *c, int rows, int dp, const float *a, int64_t ars,      \
						     int64_t aks, int nk, const float *b)            \
	{                                                                                            \
		int r = 0;                                                                           \
		for (; r + 4 <= rows; r += 4)                                                        \
			attn_acc_rows_##isa(c + (size_t)r * dp, dp, a + r * ars, ars, aks, nk, b, 4); \
		for (; r < rows; r++)                                                                \
			attn_acc_rows_##isa(c + (size_t)r * dp, dp, a + r * ars, ars, aks, nk, b, 1); \
	}                                                                                            \
                                                                                                     \
	/* s = 2^(s - sub) per lane: 2^f by the polynomial on f = x - rint(x), times 2^rint(x) */      \
	SIMD_TARGET_##isa static void attn_exp2_##isa(float *s, int rows, const float *sub)           \
	{                                                                                            \
		for (int j = 0; j < rows; j++) {                                                     \
			for (int i = 0; i < ATTN_BLOCK; i += VL_##isa) {                             \
				Vf_##isa x = vloadf_##isa(s + j * ATTN_BLOCK + i) - vloadf_##isa(sub + i); \
				x = vmax_##isa(x, vset1_##isa(-127.0f));                             \
				Vf_##isa n = vrint_##isa(x), f = x - n;                              \
				Vf_##isa p = vset1_##isa(attn_exp2_poly[7]);                         \
				for (int m = 6; m >= 0; m--)                                         \
					p = vfma_##isa(p, f, vset1_##isa(attn_exp2_poly[m]));        \
				vstoref_##isa(s + j * ATTN_BLOCK + i, p * vpow2i_##isa(n));          \
			}                                                                            \
		}                                                                                    \
	}
SIMD_EACH_ISA(ATTN_TILES_VECTOR)

/* ---- scalar (fmaf: the same roundings as the vector paths) ---- */

static void attn_qk_scalar(const float *x, int nx, int64_t xs, const float *yt, int d, float *out)
{
	for (int j = 0; j < nx; j++) {
		float acc[ATTN_BLOCK] = {0};
		for (int k = 0; k < d; k++)
			for (int i = 0; i < ATTN_BLOCK; i++)
				acc[i] = fmaf(x[j * xs + k], yt[k * ATTN_BLOCK + i], acc[i]);
		memcpy(out + j * ATTN_BLOCK, acc, sizeof(acc));
	}
}

static void attn_acc_scalar(float *c, int rows, int dp, const float *a, int64_t ars, int64_t aks, int nk,
			    const float *b)
{
	for (int r = 0; r < rows; r++)
		for (int k = 0; k < nk; k++)
			for (int col = 0; col < dp; col++)
				c[(size_t)r * dp + col] = fmaf(a[r * ars + k * aks], b[(size_t)k * dp + col],
							       c[(size_t)r * dp + col]);
}

static void attn_exp2_scalar(float *s, int rows, const float *sub)
{
	for (int j = 0; j < rows; j++) {
		for (int i = 0; i < ATTN_BLOCK; i++) {
			float x = s[j * ATTN_BLOCK + i] - sub[i];
			x = x > -127.0f ? x : -127.0f; /* as vmaxps: NaN -> -127 */
			float n = nearbyintf(x), f = x - n, p = attn_exp2_poly[7];
			for (int m = 6; m >= 0; m--)
				p = fmaf(p, f, attn_exp2_poly[m]);
			uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
			float scale;
			memcpy(&scale, &bits, sizeof(scale));
			s[j * ATTN_BLOCK + i] = p * scale;
		}
	}
}

static inline Attn_Tiles attn_tiles(void)
{
	switch (simd_level()) {
	case SIMD_AVX512:
		return (Attn_Tiles){attn_qk_avx512, attn_acc_avx512, attn_exp2_avx512};
	case SIMD_AVX2:
		return (Attn_Tiles){attn_qk_avx2, attn_acc_avx2, attn_exp2_avx2};
	default:
		return (Attn_Tiles){attn_qk_scalar, attn_acc_scalar, attn_exp2_scalar};
	}
}

/* One key tile of the forward's online softmax over the S^T tile s (nk keys x ATTN_BLOCK
 * lanes, base 2): m_new = max(m, max_j s_j); alpha = 2^(m - m_new); s = p = 2^(s - m_new);
 * l = alpha l + sum_j p; the first rows rows of o (dp floats apart) are scaled by alpha.
 * Padded lanes see scores 0, so m_new stays finite for every lane; a lane with every key
 * masked keeps m = -inf and gets alpha = p = 0 (exp2 maps NaN to 0). */
static inline void attn_softmax_tile(const Attn_Tiles *t, float *s, int nk, float *m, float *l, float *o, int rows,
				     int dp)
{
	float mnew[ATTN_BLOCK], alpha[ATTN_BLOCK];
	memcpy(mnew, m, sizeof(mnew));
	for (int j = 0; j < nk; j++)
		for (int i = 0; i < ATTN_BLOCK; i++)
			mnew[i] = s[j * ATTN_BLOCK + i] > mnew[i] ? s[j * ATTN_BLOCK + i] : mnew[i];
	memcpy(alpha, m, sizeof(alpha));
	t->exp2(alpha, 1, mnew);
	t->exp2(s, nk, mnew);
	for (int i = 0; i < ATTN_BLOCK; i++)
		l[i] *= alpha[i];
	for (int j = 0; j < nk; j++)
		for (int i = 0; i < ATTN_BLOCK; i++)
			l[i] += s[j * ATTN_BLOCK + i];
	memcpy(m, mnew, sizeof(mnew));
	for (int i = 0; i < rows; i++)
		for (int k = 0; k < dp; k++)
			o[i * dp + k] *= alpha[i];
}

#endif
