// attention backward. With P_ij = 2^(s_ij * log2 e - lse_i * log2 e) = softmax_j(s_ij) recomputed
// from the forward's lse, D_i = dout_i . out_i (attention_bwd_delta), dP_ij = dout_i . v_j and
// dS_ij = P_ij (dP_ij - D_i):
//   dV_j = sum_i P_ij dout_i,   dK_j = scale sum_i dS_ij q_i,   dQ_i = scale sum_j dS_ij k_j
// Deterministic, no atomics: one kernel owns each dK/dV row block (all query heads of its KV
// head, every query block in order), another each dQ row block (every key block in order);
// S and dP are recomputed by both (FlashAttention-2's deterministic two-kernel backward).
//
// attn_dkdv_<bf16|fp16>_<HD>: a block takes BN keys of one KV head; each group of DSPLIT
// warps 16 keys. Per step (query head, BM queries, Q and dO double-buffered with cp.async):
//   S^T = K Q^T and dP^T = V dO^T (mma, keys as rows), P^T and dS^T in registers, then
//   dV += P^T dO and dK += dS^T Q with P^T, dS^T as A fragments straight from the C tiles.
// attn_dq_<bf16|fp16>_<HD>: a block takes BM queries of one head, each warp group 16 rows,
//   walking the keys BN at a time: S = Q K^T, dP = dO V^T, dQ += dS K.
// attn_*_simt_<dtype>: one warp per row, for fp32 and GPUs before sm_80.
// attention_kv_bwd (keys in their own sequences, p.cu_k != p.cu_q) runs the same kernels: a
// sequence's queries [qlo, qhi) see keys j <= i + off (off = khi - qhi, bottom-right), and with
// p.accumulate dK, dV are fp32 rows the kernels add into. A sliding window w also hides keys
// j <= i + off - w; the tiles it hides wholly are skipped.
#include "attention.cuh"
#include "op_params.cuh"
#include "reduce.cuh"

// ---- D = rowsum(dout * out): the catalogue op attention_bwd_delta, one warp per (token, head) ----

template <class D>
__device__ void bwd_delta(const typename D::T *dout, const typename D::T *out, float *Dv, long long total,
			  long long heads, long long hd)
{
	const long long warps = (long long)gridDim.x * (blockDim.x / 32);
	const int lane = threadIdx.x & 31;
	for (long long w = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; w < total * heads; w += warps) {
		const long long t = w / heads, h = w % heads, base = w * hd; // w = t * heads + h
		float s = 0.0f;
		for (long long c = lane; c < hd; c += 32)
			s += D::load(dout[base + c]) * D::load(out[base + c]);
		s = warp_sum(s);
		if (lane == 0)
			Dv[h * total + t] = s;
	}
}

#define BWD_DELTA(DT, TAG)                                                                                \
	extern "C" __global__ void dataflow_cuda_attention_bwd_delta_##DT(DATAFLOW_ATTENTION_BWD_DELTA_PARAMS(DT##_t)) \
	{                                                                                                 \
		bwd_delta<TAG>(dout, out, D, total_tokens, num_q_heads, head_dim);                        \
	}
BWD_DELTA(fp32, Fp32)
BWD_DELTA(fp16, Fp16)
BWD_DELTA(bf16, Bf16)

// lse * log2(e) of query i of head h, +inf (so P = 0) for a row outside the sequence or
// one whose forward saw no key
__device__ __forceinline__ float lse2_of(const Attn_Params &p, long long h, long long i, long long hi)
{
	if (i >= hi)
		return ATTN_INF;
	const float l = p.lse_in[h * p.total_q + i];
	return l == -ATTN_INF ? ATTN_INF : l * ATTN_LOG2E;
}

// S = A B^T and dP = A2 B2^T for a warp's 16 rows (row0 of the A tiles) against N column
// blocks of 8 (the B tiles' rows), over head dim HD: the two products both backward kernels
// recompute (dK/dV: A = K, A2 = V, B = Q, B2 = dO; dQ: A = Q, A2 = dO, B = K, B2 = V).
template <class D, int HD, int N>
__device__ __forceinline__ void s_and_dp(float (&s)[N][4], float (&dp)[N][4], const u16 *a, const u16 *a2, int row0,
					 const u16 *b, const u16 *b2)
{
#pragma unroll
	for (int n = 0; n < N; n++)
		s[n][0] = s[n][1] = s[n][2] = s[n][3] = dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
#pragma unroll
	for (int kk = 0; kk < HD; kk += 16) {
		u32 fa[4], fa2[4];
		ldsm_x4(fa, a_addr<HD>(a, row0, kk));
		ldsm_x4(fa2, a_addr<HD>(a2, row0, kk));
#pragma unroll
		for (int n = 0; n < N; n += 2) {
			u32 f[4];
			ldsm_x4(f, b_addr<HD>(b, n * 8, kk));
			Mma<D>::mma(s[n], fa, f[0], f[1]);
			Mma<D>::mma(s[n + 1], fa, f[2], f[3]);
			ldsm_x4(f, b_addr<HD>(b2, n * 8, kk));
			Mma<D>::mma(dp[n], fa2, f[0], f[1]);
			Mma<D>::mma(dp[n + 1], fa2, f[2], f[3]);
		}
	}
}

// acc += A B over a warp's NDC column blocks of 8 from col0: A a k16 fragment, B rows k0..k0 + 15
// of a [keys or queries][HD] tile (read transposed).
template <class D, int HD, int NDC>
__device__ __forceinline__ void mma_bt(float (&acc)[NDC][4], const u32 (&a)[4], const u16 *tile, int k0, int col0)
{
#pragma unroll
	for (int d = 0; d < NDC; d += 2) {
		u32 b[4];
		ldsm_x4_trans(b, bt_addr<HD>(tile, k0, col0 + d * 8));
		Mma<D>::mma(acc[d], a, b[0], b[1]);
		Mma<D>::mma(acc[d + 1], a, b[2], b[3]);
	}
}

// The other side's tokens of sequence s: [lo, hi) of cu when it differs from the side the
// kernel cut into blocks (whose range is [lo0, hi0)).
__device__ __forceinline__ void other_range(const int *cu, const int *cu0, long long s, long long total, long long lo0,
					    long long hi0, long long &lo, long long &hi)
{
	lo = lo0, hi = hi0;
	if (cu != cu0)
		attn_seq_range(cu, s, total, lo, hi);
}

// Adds a pair of fp32 gradients into a row (attention_kv_bwd's dK, dV).
__device__ __forceinline__ void add_pair(float *row, int col, long long head_dim, float a, float b)
{
	if (col < head_dim)
		row[col] += a;
	if (col + 1 < head_dim)
		row[col + 1] += b;
}

// ---- dK, dV (tensor cores) ----

template <class D, int HD, int BM, int BN, int NW, int DS> __device__ void attn_dkdv_mma(const Attn_Params &p)
{
#if __CUDA_ARCH__ >= 800
	constexpr int NT = NW * 32, NQ = BM / 8, HC = HD / DS, NDC = HC / 8;
	extern __shared__ __align__(16) u16 smem[];
	u16 *sK = smem, *sV = sK + BN * HD, *sQ = sV + BN * HD, *sO = sQ + 2 * BM * HD;
	float *sL = (float *)(sO + 2 * BM * HD), *sD = sL + 2 * BM;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const int wr = warp % (NW / DS), wc = warp / (NW / DS), krow0 = wr * 16;
	const long long hkv = p.num_kv_heads, hk = blockIdx.y, G = p.num_q_heads / hkv, hd = p.head_dim;
	const Seq_Block sb = attn_find_block(p.cu_k, p.num_seqs, p.total_k, BN, blockIdx.x);
	if (sb.s < 0)
		return;
	const long long khi = sb.hi, kb = sb.lo + sb.block * BN;
	long long lo, hi; // the sequence's queries
	other_range(p.cu_q, p.cu_k, sb.s, p.total_q, sb.lo, sb.hi, lo, hi);
	const long long off = khi - hi, first = kb - off - lo;
	// causal: no query below kb - off sees the block
	const long long q_first = p.causal && first > 0 ? lo + (first / BM) * BM : lo;
	// window: no query from kb + BN - 1 - off + w on sees the block
	const long long q_end = p.window > 0 && kb + BN - 1 - off + p.window < hi ? kb + BN - 1 - off + p.window : hi;
	const long long qtiles = q_end > q_first ? (q_end - q_first + BM - 1) / BM : 0, steps = qtiles * G;
	const u16 *Q = (const u16 *)p.q, *dO = (const u16 *)p.dout;
	const bool vec = p.vec;

	load_tile<HD, BN, NT>(sK, (const u16 *)p.k, kb, khi, hkv, hk, hd, vec);
	load_tile<HD, BN, NT>(sV, (const u16 *)p.v, kb, khi, hkv, hk, hd, vec);
	// step st: query head hk * G + st / qtiles, queries q_first + (st % qtiles) * BM
	auto prefetch = [&](long long st, int buf) {
		const long long h = hk * G + st / qtiles, q0 = q_first + (st % qtiles) * BM;
		load_tile<HD, BM, NT>(sQ + buf * BM * HD, Q, q0, hi, p.num_q_heads, h, hd, vec);
		load_tile<HD, BM, NT>(sO + buf * BM * HD, dO, q0, hi, p.num_q_heads, h, hd, vec);
		for (int i = threadIdx.x; i < BM; i += NT) {
			sL[buf * BM + i] = lse2_of(p, h, q0 + i, hi);
			sD[buf * BM + i] = q0 + i < hi ? p.D[h * p.total_q + q0 + i] : 0.0f;
		}
	};
	if (steps > 0)
		prefetch(0, 0);
	cp_async_commit();

	float dk[NDC][4], dv[NDC][4];
#pragma unroll
	for (int d = 0; d < NDC; d++)
		dk[d][0] = dk[d][1] = dk[d][2] = dk[d][3] = dv[d][0] = dv[d][1] = dv[d][2] = dv[d][3] = 0.0f;

	for (long long st = 0; st < steps; st++) {
		const int buf = (int)(st & 1);
		const long long q0 = q_first + (st % qtiles) * BM;
		if (st + 1 < steps) { // the other buffer is free since the last step's closing barrier
			prefetch(st + 1, buf ^ 1);
			cp_async_commit();
			cp_async_wait<1>();
		} else {
			cp_async_wait<0>();
		}
		__syncthreads();
		const u16 *q_s = sQ + buf * BM * HD, *o_s = sO + buf * BM * HD;
		const float *l_s = sL + buf * BM, *d_s = sD + buf * BM;

		// S^T = K Q^T, dP^T = V dO^T for this warp's 16 keys
		float s[NQ][4], dp[NQ][4];
		s_and_dp<D, HD, NQ>(s, dp, sK, sV, krow0, q_s, o_s);
		// P^T, dS^T; causal: key row kr (kb + kr) is masked for query column qc (q0 + qc) when
		// kr > qc + diag. Keys past the sequence only reach dK/dV rows that are not stored.
		// Window: masked when kr <= qc + wdiag.
		const bool edge = p.causal && kb + BN - 1 > q0 + off;
		const bool wcut = p.window > 0 && kb <= q0 + BM - 1 + off - p.window;
		const int diag = clamp_diag(q0 + off - kb, BM + BN), wdiag = clamp_diag(q0 + off - kb - p.window, BM + BN);
#pragma unroll
		for (int n = 0; n < NQ; n++) {
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int qc = n * 8 + 2 * t + (e & 1), kr = krow0 + g + (e >> 1) * 8;
				float pv = exp2f(s[n][e] * p.scale_log2 - l_s[qc]);
				if ((edge && kr > qc + diag) || (wcut && kr <= qc + wdiag))
					pv = 0.0f;
				s[n][e] = pv;
				dp[n][e] = pv * (dp[n][e] - d_s[qc]);
			}
		}
		// dV += P^T dO, dK += dS^T Q over this warp's HC columns
#pragma unroll
		for (int kc = 0; kc < BM / 16; kc++) {
			u32 ap[4], as[4];
			c_to_a<D, NQ>(ap, s, kc);
			c_to_a<D, NQ>(as, dp, kc);
			mma_bt<D, HD, NDC>(dv, ap, o_s, kc * 16, wc * HC);
			mma_bt<D, HD, NDC>(dk, as, q_s, kc * 16, wc * HC);
		}
		__syncthreads(); // this buffer is refilled two steps on
	}
	cp_async_wait<0>(); // no step (a key block no query sees): K and V are still in flight

#pragma unroll
	for (int r = 0; r < 2; r++) {
		const long long j = kb + krow0 + g + r * 8;
		if (j >= khi)
			continue;
		const long long row = (j * hkv + hk) * hd;
#pragma unroll
		for (int d = 0; d < NDC; d++) {
			const int col = wc * HC + d * 8 + 2 * t;
			if (p.accumulate) {
				add_pair((float *)p.dk + row, col, hd, dk[d][2 * r] * p.scale, dk[d][2 * r + 1] * p.scale);
				add_pair((float *)p.dv + row, col, hd, dv[d][2 * r], dv[d][2 * r + 1]);
			} else {
				store_pair<D>((u16 *)p.dk + row, col, hd, dk[d][2 * r] * p.scale, dk[d][2 * r + 1] * p.scale,
					      vec);
				store_pair<D>((u16 *)p.dv + row, col, hd, dv[d][2 * r], dv[d][2 * r + 1], vec);
			}
		}
	}
#endif
}

// ---- dQ (tensor cores) ----

template <class D, int HD, int BM, int BN, int NW, int DS> __device__ void attn_dq_mma(const Attn_Params &p)
{
#if __CUDA_ARCH__ >= 800
	constexpr int NT = NW * 32, NK = BN / 8, HC = HD / DS, NDC = HC / 8;
	extern __shared__ __align__(16) u16 smem[];
	u16 *sQ = smem, *sO = sQ + BM * HD, *sK = sO + BM * HD, *sV = sK + 2 * BN * HD;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const int wr = warp % (NW / DS), wc = warp / (NW / DS), qrow0 = wr * 16;
	const long long hq = p.num_q_heads, h = blockIdx.y, hk = h / (hq / p.num_kv_heads), hd = p.head_dim;
	const Seq_Block sb = attn_find_block(p.cu_q, p.num_seqs, p.total_q, BM, attn_query_block(p));
	if (sb.s < 0)
		return;
	const long long hi = sb.hi, q0 = sb.lo + sb.block * BM, qend = q0 + BM < hi ? q0 + BM : hi;
	long long lo, khi; // the sequence's keys
	other_range(p.cu_k, p.cu_q, sb.s, p.total_k, sb.lo, sb.hi, lo, khi);
	const long long off = khi - hi;
	const long long kend = p.causal ? qend + off : khi; // the block's last query sees keys up to itself + off
	const long long kstart = attn_window_start(lo, q0 + off, p.window, BN);
	const int tiles = kend > kstart ? (int)((kend - kstart + BN - 1) / BN) : 0;
	const u16 *K = (const u16 *)p.k, *V = (const u16 *)p.v;
	const bool vec = p.vec;

	load_tile<HD, BM, NT>(sQ, (const u16 *)p.q, q0, hi, hq, h, hd, vec);
	load_tile<HD, BM, NT>(sO, (const u16 *)p.dout, q0, hi, hq, h, hd, vec);
	load_tile<HD, BN, NT>(sK, K, kstart, khi, p.num_kv_heads, hk, hd, vec);
	load_tile<HD, BN, NT>(sV, V, kstart, khi, p.num_kv_heads, hk, hd, vec);
	cp_async_commit();

	float lse2[2], Dr[2];
#pragma unroll
	for (int r = 0; r < 2; r++) {
		const long long qi = q0 + qrow0 + g + r * 8;
		lse2[r] = lse2_of(p, h, qi, hi);
		Dr[r] = qi < hi ? p.D[h * p.total_q + qi] : 0.0f;
	}
	float dq[NDC][4];
#pragma unroll
	for (int d = 0; d < NDC; d++)
		dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.0f;

	for (int j = 0; j < tiles; j++) {
		const long long kb = kstart + (long long)j * BN;
		const u16 *k_s = sK + (j & 1) * BN * HD, *v_s = sV + (j & 1) * BN * HD;
		if (j + 1 < tiles) {
			load_tile<HD, BN, NT>(sK + ((j + 1) & 1) * BN * HD, K, kb + BN, khi, p.num_kv_heads, hk, hd, vec);
			load_tile<HD, BN, NT>(sV + ((j + 1) & 1) * BN * HD, V, kb + BN, khi, p.num_kv_heads, hk, hd, vec);
			cp_async_commit();
			cp_async_wait<1>();
		} else {
			cp_async_wait<0>();
		}
		__syncthreads();

		float s[NK][4], dp[NK][4];
		s_and_dp<D, HD, NK>(s, dp, sQ, sO, qrow0, k_s, v_s);
		// keys past the sequence are masked (their zero rows would add P to dQ), and causal
		// key column col > row + diag; with a window, col <= row + wdiag
		const bool wcut = p.window > 0 && kb <= q0 + BM - 1 + off - p.window;
		const bool edge = kb + BN > khi || (p.causal && kb + BN - 1 > q0 + off) || wcut;
		const int kvalid = khi - kb < BN ? (int)(khi - kb) : BN, diag = clamp_diag(q0 + off - kb, BM + BN);
		const int wdiag = clamp_diag(q0 + off - kb - p.window, BM + BN);
#pragma unroll
		for (int n = 0; n < NK; n++) {
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int col = n * 8 + 2 * t + (e & 1), row = qrow0 + g + (e >> 1) * 8;
				float pv = exp2f(s[n][e] * p.scale_log2 - lse2[e >> 1]);
				if (edge && (col >= kvalid || (p.causal && col > row + diag) || (wcut && col <= row + wdiag)))
					pv = 0.0f;
				dp[n][e] = pv * (dp[n][e] - Dr[e >> 1]);
			}
		}
		// dQ += dS K over this warp's HC columns
#pragma unroll
		for (int kc = 0; kc < BN / 16; kc++) {
			u32 as[4];
			c_to_a<D, NK>(as, dp, kc);
			mma_bt<D, HD, NDC>(dq, as, k_s, kc * 16, wc * HC);
		}
		__syncthreads();
	}
	cp_async_wait<0>();

#pragma unroll
	for (int r = 0; r < 2; r++) {
		const long long qi = q0 + qrow0 + g + r * 8;
		if (qi >= qend)
			continue;
		u16 *row = (u16 *)p.dq + (qi * hq + h) * hd;
#pragma unroll
		for (int d = 0; d < NDC; d++)
			store_pair<D>(row, wc * HC + d * 8 + 2 * t, hd, dq[d][2 * r] * p.scale, dq[d][2 * r + 1] * p.scale, vec);
	}
#endif
}

#define ATTN_DKDV_MMA(HD, BM, BN, NW, DS) ATTN_MMA_ENTRIES(dkdv, HD, NW, ATTN_DKDV_MIN_BLOCKS(HD), BM, BN, NW, DS)
ATTN_DKDV_TILES(ATTN_DKDV_MMA)

#define ATTN_DQ_MMA(HD, BM, BN, NW, DS) ATTN_MMA_ENTRIES(dq, HD, NW, ATTN_DQ_MIN_BLOCKS(HD), BM, BN, NW, DS)
ATTN_DQ_TILES(ATTN_DQ_MMA)

// ---- SIMT: one warp per row, lane holding head_dim elements lane, lane + 32, ... ----

template <class D> __device__ __forceinline__ void load_row(float (&x)[ATTN_SIMT_MAX_PER_LANE], const typename D::T *row,
							      long long hd, float scale)
{
	const int lane = threadIdx.x & 31;
#pragma unroll
	for (int e = 0; e < ATTN_SIMT_MAX_PER_LANE; e++)
		x[e] = lane + 32 * e < hd ? D::load(row[lane + 32 * e]) * scale : 0.0f;
}

template <class D> __device__ __forceinline__ float dot_row(const float (&x)[ATTN_SIMT_MAX_PER_LANE], const typename D::T *row,
							      long long hd)
{
	const int lane = threadIdx.x & 31;
	float s = 0.0f;
#pragma unroll
	for (int e = 0; e < ATTN_SIMT_MAX_PER_LANE; e++)
		if (lane + 32 * e < hd)
			s += x[e] * D::load(row[lane + 32 * e]);
	return warp_sum(s);
}

template <class D> __device__ __forceinline__ void axpy_row(float (&acc)[ATTN_SIMT_MAX_PER_LANE], float a, const typename D::T *row,
							      long long hd)
{
	const int lane = threadIdx.x & 31;
#pragma unroll
	for (int e = 0; e < ATTN_SIMT_MAX_PER_LANE; e++)
		if (lane + 32 * e < hd)
			acc[e] += a * D::load(row[lane + 32 * e]);
}

template <class D> __device__ __forceinline__ void store_row(typename D::T *row, const float (&x)[ATTN_SIMT_MAX_PER_LANE],
							       long long hd, float scale)
{
	const int lane = threadIdx.x & 31;
#pragma unroll
	for (int e = 0; e < ATTN_SIMT_MAX_PER_LANE; e++)
		if (lane + 32 * e < hd)
			row[lane + 32 * e] = D::store(x[e] * scale);
}

// dQ_i of query token i (the warp's) and head blockIdx.y, keys in order
template <class D> __device__ void attn_dq_simt(const Attn_Params &p)
{
	typedef typename D::T T;
	const long long hq = p.num_q_heads, hkv = p.num_kv_heads, h = blockIdx.y, hk = h / (hq / hkv), hd = p.head_dim;
	const long long gi = (long long)blockIdx.x * ATTN_SIMT_WARPS + (threadIdx.x >> 5);
	const Seq_Block sb = attn_find_block(p.cu_q, p.num_seqs, p.total_q, 1, gi);
	if (sb.s < 0)
		return;
	long long klo, khi;
	other_range(p.cu_k, p.cu_q, sb.s, p.total_k, sb.lo, sb.hi, klo, khi);
	const long long i = sb.lo + sb.block, kend = p.causal ? i + 1 + khi - sb.hi : khi;
	const float l2 = lse2_of(p, h, i, sb.hi), Di = p.D[h * p.total_q + i];
	float q[ATTN_SIMT_MAX_PER_LANE], dO[ATTN_SIMT_MAX_PER_LANE], dq[ATTN_SIMT_MAX_PER_LANE] = {};
	load_row<D>(q, (const T *)p.q + (i * hq + h) * hd, hd, p.scale_log2);
	load_row<D>(dO, (const T *)p.dout + (i * hq + h) * hd, hd, 1.0f);
	for (long long j = attn_window_start(klo, i + khi - sb.hi, p.window, 1); j < kend; j++) {
		const T *kj = (const T *)p.k + (j * hkv + hk) * hd, *vj = (const T *)p.v + (j * hkv + hk) * hd;
		const float pj = exp2f(dot_row<D>(q, kj, hd) - l2);
		axpy_row<D>(dq, pj * (dot_row<D>(dO, vj, hd) - Di), kj, hd);
	}
	store_row<D>((T *)p.dq + (i * hq + h) * hd, dq, hd, p.scale);
}

// dK_j, dV_j of key token j (the warp's) and KV head blockIdx.y: query heads of the group in
// order, queries in order
template <class D> __device__ void attn_dkdv_simt(const Attn_Params &p)
{
	typedef typename D::T T;
	const long long hq = p.num_q_heads, hkv = p.num_kv_heads, hk = blockIdx.y, G = hq / hkv, hd = p.head_dim;
	const long long gj = (long long)blockIdx.x * ATTN_SIMT_WARPS + (threadIdx.x >> 5);
	const Seq_Block sb = attn_find_block(p.cu_k, p.num_seqs, p.total_k, 1, gj);
	if (sb.s < 0)
		return;
	long long qlo, qhi;
	other_range(p.cu_q, p.cu_k, sb.s, p.total_q, sb.lo, sb.hi, qlo, qhi);
	const long long j = sb.lo + sb.block, first = j - (sb.hi - qhi); // causal: the first query that sees key j
	// window: the queries from first + w on do not see it
	const long long iend = p.window > 0 && first + p.window < qhi ? first + p.window : qhi;
	float k[ATTN_SIMT_MAX_PER_LANE], v[ATTN_SIMT_MAX_PER_LANE];
	float dk[ATTN_SIMT_MAX_PER_LANE] = {}, dv[ATTN_SIMT_MAX_PER_LANE] = {};
	load_row<D>(k, (const T *)p.k + (j * hkv + hk) * hd, hd, p.scale_log2);
	load_row<D>(v, (const T *)p.v + (j * hkv + hk) * hd, hd, 1.0f);
	for (long long h = hk * G; h < (hk + 1) * G; h++) {
		for (long long i = p.causal && first > qlo ? first : qlo; i < iend; i++) {
			const T *qi = (const T *)p.q + (i * hq + h) * hd, *oi = (const T *)p.dout + (i * hq + h) * hd;
			const float pj = exp2f(dot_row<D>(k, qi, hd) - lse2_of(p, h, i, qhi));
			const float ds = pj * (dot_row<D>(v, oi, hd) - p.D[h * p.total_q + i]);
			axpy_row<D>(dv, pj, oi, hd);
			axpy_row<D>(dk, ds, qi, hd);
		}
	}
	if (p.accumulate) {
		const int lane = threadIdx.x & 31;
		float *dk_row = (float *)p.dk + (j * hkv + hk) * hd, *dv_row = (float *)p.dv + (j * hkv + hk) * hd;
#pragma unroll
		for (int e = 0; e < ATTN_SIMT_MAX_PER_LANE; e++)
			if (lane + 32 * e < hd) {
				dk_row[lane + 32 * e] += dk[e] * p.scale;
				dv_row[lane + 32 * e] += dv[e];
			}
		return;
	}
	store_row<D>((T *)p.dk + (j * hkv + hk) * hd, dk, hd, p.scale);
	store_row<D>((T *)p.dv + (j * hkv + hk) * hd, dv, hd, 1.0f);
}

ATTN_SIMT_ENTRIES(attn_dq_simt)
ATTN_SIMT_ENTRIES(attn_dkdv_simt)
