// attention forward (attention and attention_kv; launched by the external op in
// cuda_attention.c), FlashAttention-2 style: for query i of a sequence and head h (kv head
// h / (Hq / Hkv)), keys j of the same sequence (causal: j <= i + k_len - q_len; a sliding
// window w also hides j <= i + k_len - q_len - w, and the key tiles it hides wholly are skipped),
//   s_ij = scale * q_i . k_j,  out_i = sum_j softmax_j(s_ij) v_j,  lse_i = log sum_j exp(s_ij)
// with the online softmax in base 2: running max m and sum l per query, O rescaled by
// 2^(m_old - m_new) when the max grows; a query that sees no key gets out = 0, lse = -inf.
//
// attn_fwd_<bf16|fp16>_<HD>: tensor cores (sm_80+). A block takes BM queries of one head
// (NW warps of 16 or 32 rows) and walks the keys BN at a time, K and V double-buffered with
// cp.async; S = Q K^T and O += P V are mma.sync with fp32 accumulators, P never leaves
// registers. attn_fwd_simt_<dtype>: one warp per query row, for fp32 and for GPUs before
// sm_80.
#include "attention.cuh"
#include "reduce.cuh"

template <class D, int HD, int BM, int BN, int NW> __device__ void attn_fwd_mma(const Attn_Params &p)
{
#if __CUDA_ARCH__ >= 800
	constexpr int NT = NW * 32, MT = BM / (16 * NW), NK = BN / 8, ND = HD / 8;
	extern __shared__ __align__(16) u16 smem[];
	u16 *sQ = smem, *sK = sQ + BM * HD, *sV = sK + 2 * BN * HD;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	const long long hq = p.num_q_heads, h = blockIdx.y, hk = h / (hq / p.num_kv_heads);
	const Seq_Block sb = attn_find_block(p.cu_q, p.num_seqs, p.total_q, BM, attn_query_block(p));
	if (sb.s < 0)
		return;
	long long klo = sb.lo, khi = sb.hi;
	if (p.cu_k != p.cu_q)
		attn_seq_range(p.cu_k, sb.s, p.total_k, klo, khi);
	const long long q0 = sb.lo + sb.block * BM, qend = q0 + BM < sb.hi ? q0 + BM : sb.hi;
	const long long off = khi - sb.hi; // causal: query i sees keys j <= i + off
	const long long kend = p.causal && qend + off < khi ? qend + off : khi;
	const long long kstart = attn_window_start(klo, q0 + off, p.window, BN);
	const int tiles = kend > kstart ? (int)((kend - kstart + BN - 1) / BN) : 0;
	const u16 *Q = (const u16 *)p.q, *K = (const u16 *)p.k, *V = (const u16 *)p.v;
	const bool vec = p.vec;

	load_tile<HD, BM, NT>(sQ, Q, q0, qend, hq, h, p.head_dim, vec);
	if (tiles > 0) {
		load_tile<HD, BN, NT>(sK, K, kstart, khi, p.num_kv_heads, hk, p.head_dim, vec);
		load_tile<HD, BN, NT>(sV, V, kstart, khi, p.num_kv_heads, hk, p.head_dim, vec);
	}
	cp_async_commit();

	float o[MT][ND][4], m[MT][2], l[MT][2];
#pragma unroll
	for (int mt = 0; mt < MT; mt++) {
#pragma unroll
		for (int d = 0; d < ND; d++)
			o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0.0f;
		m[mt][0] = m[mt][1] = -ATTN_INF;
		l[mt][0] = l[mt][1] = 0.0f;
	}
	const int row0 = warp * MT * 16; // this warp's first row in the block

	for (int j = 0; j < tiles; j++) {
		const long long kb = kstart + (long long)j * BN;
		const u16 *k_s = sK + (j & 1) * BN * HD, *v_s = sV + (j & 1) * BN * HD;
		if (j + 1 < tiles) { // prefetch the next K, V into the other buffer (free since the last barrier)
			load_tile<HD, BN, NT>(sK + ((j + 1) & 1) * BN * HD, K, kb + BN, khi, p.num_kv_heads, hk,
					      p.head_dim, vec);
			load_tile<HD, BN, NT>(sV + ((j + 1) & 1) * BN * HD, V, kb + BN, khi, p.num_kv_heads, hk,
					      p.head_dim, vec);
			cp_async_commit();
			cp_async_wait<1>();
		} else {
			cp_async_wait<0>();
		}
		__syncthreads();

		// S = Q K^T for this warp's rows
		float s[MT][NK][4];
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
#pragma unroll
			for (int n = 0; n < NK; n++)
				s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < HD; kk += 16) {
			u32 a[MT][4];
#pragma unroll
			for (int mt = 0; mt < MT; mt++)
				ldsm_x4(a[mt], a_addr<HD>(sQ, row0 + mt * 16, kk));
#pragma unroll
			for (int n = 0; n < NK; n += 2) {
				u32 b[4];
				ldsm_x4(b, b_addr<HD>(k_s, n * 8, kk));
#pragma unroll
				for (int mt = 0; mt < MT; mt++) {
					Mma<D>::mma(s[mt][n], a[mt], b[0], b[1]);
					Mma<D>::mma(s[mt][n + 1], a[mt], b[2], b[3]);
				}
			}
		}

		// mask (in block coordinates: key column col is valid below kvalid, and, causal, up to
		// row + diag; with a window past row + wdiag), online softmax in base 2
		const bool wcut = p.window > 0 && kb <= q0 + BM - 1 + off - p.window;
		const bool edge = kb + BN > khi || (p.causal && kb + BN - 1 > q0 + off) || wcut;
		const int kvalid = khi - kb < BN ? (int)(khi - kb) : BN;
		const int diag = clamp_diag(q0 + off - kb, BM + BN), wdiag = clamp_diag(q0 + off - kb - p.window, BM + BN);
#pragma unroll
		for (int mt = 0; mt < MT; mt++) {
#pragma unroll
			for (int r = 0; r < 2; r++) {
				const int row = row0 + mt * 16 + g + r * 8;
				float mx = -ATTN_INF;
#pragma unroll
				for (int n = 0; n < NK; n++) {
#pragma unroll
					for (int c = 0; c < 2; c++) {
						float x = s[mt][n][2 * r + c] * p.scale_log2;
						const int col = n * 8 + 2 * t + c;
						if (edge && (col >= kvalid || (p.causal && col > row + diag) ||
							     (wcut && col <= row + wdiag)))
							x = -ATTN_INF;
						s[mt][n][2 * r + c] = x;
						mx = fmaxf(mx, x);
					}
				}
				mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
				mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
				const float mnew = fmaxf(m[mt][r], mx), base = mnew == -ATTN_INF ? 0.0f : mnew;
				const float alpha = exp2f(m[mt][r] - base);
				m[mt][r] = mnew;
				float rs = 0.0f;
#pragma unroll
				for (int n = 0; n < NK; n++) {
#pragma unroll
					for (int c = 0; c < 2; c++) {
						float e = exp2f(s[mt][n][2 * r + c] - base);
						s[mt][n][2 * r + c] = e;
						rs += e;
					}
				}
				l[mt][r] = l[mt][r] * alpha + rs;
#pragma unroll
				for (int d = 0; d < ND; d++) {
					o[mt][d][2 * r] *= alpha;
					o[mt][d][2 * r + 1] *= alpha;
				}
			}
		}

		// O += P V, P from the S registers (two n8 tiles = one k16 chunk of A)
#pragma unroll
		for (int kc = 0; kc < BN / 16; kc++) {
			u32 a[MT][4];
#pragma unroll
			for (int mt = 0; mt < MT; mt++) {
				c_to_a<D, NK>(a[mt], s[mt], kc);
			}
#pragma unroll
			for (int d = 0; d < ND; d += 2) {
				u32 b[4];
				ldsm_x4_trans(b, bt_addr<HD>(v_s, kc * 16, d * 8));
#pragma unroll
				for (int mt = 0; mt < MT; mt++) {
					Mma<D>::mma(o[mt][d], a[mt], b[0], b[1]);
					Mma<D>::mma(o[mt][d + 1], a[mt], b[2], b[3]);
				}
			}
		}
		__syncthreads(); // this buffer is refilled two steps on
	}
	cp_async_wait<0>();

	// out = O / l, lse = (m + log2 l) ln 2; l summed over the quad that shares a row
#pragma unroll
	for (int mt = 0; mt < MT; mt++) {
#pragma unroll
		for (int r = 0; r < 2; r++) {
			float lr = l[mt][r];
			lr += __shfl_xor_sync(0xffffffffu, lr, 1);
			lr += __shfl_xor_sync(0xffffffffu, lr, 2);
			const long long qi = q0 + row0 + mt * 16 + g + r * 8;
			if (qi >= qend)
				continue;
			const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;
			u16 *row = (u16 *)p.out + (qi * hq + h) * p.head_dim;
#pragma unroll
			for (int d = 0; d < ND; d++)
				store_pair<D>(row, d * 8 + 2 * t, p.head_dim, o[mt][d][2 * r] * inv, o[mt][d][2 * r + 1] * inv,
					      vec);
			if (t == 0)
				p.lse[h * p.total_q + qi] = lr > 0.0f ? (m[mt][r] + log2f(lr)) * ATTN_LN2 : -ATTN_INF;
		}
	}
#endif
}

#define ATTN_FWD_MMA(HD, BM, BN, NW, DSPLIT) ATTN_MMA_ENTRIES(fwd, HD, NW, ATTN_FWD_MIN_BLOCKS(HD), BM, BN, NW)
ATTN_FWD_TILES(ATTN_FWD_MMA)

// One warp per (query token, head): lane holds head_dim elements lane, lane + 32, ...
template <class D> __device__ void attn_fwd_simt(const Attn_Params &p)
{
	constexpr int E = ATTN_SIMT_MAX_PER_LANE;
	const int lane = threadIdx.x & 31;
	const long long hq = p.num_q_heads, h = blockIdx.y, hk = h / (hq / p.num_kv_heads), hd = p.head_dim;
	const long long gi = (long long)blockIdx.x * ATTN_SIMT_WARPS + (threadIdx.x >> 5);
	const Seq_Block sb = attn_find_block(p.cu_q, p.num_seqs, p.total_q, 1, gi);
	if (sb.s < 0)
		return;
	const long long i = sb.lo + sb.block;
	long long klo = sb.lo, khi = sb.hi;
	if (p.cu_k != p.cu_q)
		attn_seq_range(p.cu_k, sb.s, p.total_k, klo, khi);
	const long long off = khi - sb.hi, kend = p.causal && i + off + 1 < khi ? i + off + 1 : khi;
	const typename D::T *Q = (const typename D::T *)p.q, *K = (const typename D::T *)p.k,
			    *V = (const typename D::T *)p.v;
	float q[E], o[E];
#pragma unroll
	for (int e = 0; e < E; e++) {
		const long long c = lane + 32 * e;
		q[e] = c < hd ? D::load(Q[(i * hq + h) * hd + c]) * p.scale_log2 : 0.0f;
		o[e] = 0.0f;
	}
	float m = -ATTN_INF, l = 0.0f;
	for (long long j = attn_window_start(klo, i + off, p.window, 1); j < kend; j++) {
		const typename D::T *kj = K + (j * p.num_kv_heads + hk) * hd, *vj = V + (j * p.num_kv_heads + hk) * hd;
		float s = 0.0f;
#pragma unroll
		for (int e = 0; e < E; e++)
			if (lane + 32 * e < hd)
				s += q[e] * D::load(kj[lane + 32 * e]);
		s = warp_sum(s);
		const float mnew = fmaxf(m, s), alpha = exp2f(m - mnew), pj = exp2f(s - mnew);
		l = l * alpha + pj;
#pragma unroll
		for (int e = 0; e < E; e++)
			o[e] = o[e] * alpha + (lane + 32 * e < hd ? pj * D::load(vj[lane + 32 * e]) : 0.0f);
		m = mnew;
	}
	const float inv = l > 0.0f ? 1.0f / l : 0.0f;
	typename D::T *out = (typename D::T *)p.out + (i * hq + h) * hd;
#pragma unroll
	for (int e = 0; e < E; e++)
		if (lane + 32 * e < hd)
			out[lane + 32 * e] = D::store(o[e] * inv);
	if (lane == 0)
		p.lse[h * p.total_q + i] = l > 0.0f ? (m + log2f(l)) * ATTN_LN2 : -ATTN_INF;
}

ATTN_SIMT_ENTRIES(attn_fwd_simt)

// ---- around cuDNN's SDPA (cuda_attention.c) ----
// cuDNN runs tokens [0, T) as one sequence, into scratch buffers. attn_cudnn_check sets *flag
// = 1 when that is exactly the op's sequence (num_seqs == 1 and the sanitized range is [0, T)),
// so that attn_cudnn_commit copies the scratch results into place and the native kernels,
// launched after with skip = flag, do nothing; otherwise the commit does nothing and the native
// kernels compute the op (rows outside the sequence stay untouched either way).
extern "C" __global__ void attn_cudnn_check(const int *cu, long long num_seqs, long long total, int *flag)
{
	if (threadIdx.x == 0 && blockIdx.x == 0) {
		const long long lo = attn_clamp(cu, 0, total), hi = attn_clamp(cu, 1, total);
		*flag = num_seqs == 1 && lo == 0 && hi == total;
	}
}

extern "C" __global__ void attn_cudnn_commit(const int *flag, const unsigned char *src, unsigned char *dst,
					     long long bytes)
{
	if (!*flag)
		return;
	if ((((unsigned long long)src | (unsigned long long)dst) & 15) == 0) {
		FOR_EACH_INDEX(i, bytes / 16)
		((uint4 *)dst)[i] = ((const uint4 *)src)[i];
		FOR_EACH_INDEX(i, bytes % 16)
		dst[bytes / 16 * 16 + i] = src[bytes / 16 * 16 + i];
	} else {
		FOR_EACH_INDEX(i, bytes)
		dst[i] = src[i];
	}
}
