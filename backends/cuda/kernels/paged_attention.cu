// paged_attention's two halves (flash-decoding over a paged KV cache), SIMT, as the host
// kernels (backends/host/kernels/paged_attention.c) compute them:
//   partial, a block per (sequence b, kv head, split of split_size keys), a warp per row (new
//     token x query head of the group); lanes take 32 keys at a time gathered from the pages:
//     s_j = (scale log2 e) q . k_j (masked for j > seq_len - q_len + token), online softmax in
//     base 2: m = max, l = sum 2^(s - m), o = sum 2^(s - m) v (unnormalized, lanes over head_dim)
//   combine, a block per sequence, a warp per (token, head): M = max_s m_s,
//     L = sum_s 2^(m_s - M) l_s, out = sum_s 2^(m_s - M) o_s / L, lse = (M + log2 L) ln 2.
// The tables are untrusted: offsets are clamped as attention's, a page id outside the pool or
// a length past the table makes the split's m and l NaN (the output NaN).
#include "dtype.cuh"
#include "op_params.cuh"
#include "reduce.cuh"

#define PAGED_WARPS 4
#define PAGED_LOG2E 1.44269504088896340736f
#define PAGED_LN2 0.69314718055994530942f
#define PAGED_INF __int_as_float(0x7f800000)
#define PAGED_NAN __int_as_float(0x7fc00000)
#define PAGED_COLS (DATAFLOW_ATTENTION_MAX_HEAD_DIM / 32) // head_dim elements per lane

// Sequence b's queries [lo, hi): offsets clamped to [0, total], each range starting no
// earlier than the previous one ended (the host cursor's rule, walked from the start).
__device__ void paged_seq_range(const int *cu, long long b, long long total, long long *lo, long long *hi)
{
	long long end = 0;
	for (long long s = 0; s <= b; s++) {
		long long a = min(max((long long)cu[s], 0LL), total), e = min(max((long long)cu[s + 1], 0LL), total);
		*lo = max(a, end);
		*hi = max(e, *lo);
		end = *hi;
	}
}

__device__ __forceinline__ float paged_warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

template <class D> __device__ void paged_partial(DATAFLOW_PAGED_ATTENTION_PARTIAL_PARAMS(typename D::T))
{
	__shared__ float qs[PAGED_WARPS][DATAFLOW_ATTENTION_MAX_HEAD_DIM];
	const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
	const long long hd = head_dim, hkv = num_kv_heads, g = num_q_heads / hkv, ps = page_size;
	const long long table_keys = max_pages * ps, splits = (table_keys + split_size - 1) / split_size;
	for (long long item = blockIdx.x; item < batch * hkv * splits; item += gridDim.x) {
		const long long b = item / (hkv * splits), hk = item / splits % hkv, split = item % splits;
		long long lo, hi;
		paged_seq_range(cu_seqlens_q, b, total_q, &lo, &hi);
		long long len = max((long long)seq_lens[b], 0LL);
		const bool table_ok = len <= table_keys;
		len = min(len, table_keys);
		const long long k0 = split * split_size, k1 = max(min(k0 + split_size, len), k0), nq = hi - lo;
		for (long long r = warp; r < nq * g; r += PAGED_WARPS) {
			const long long tok = r / g, h = hk * g + r % g, last = len - nq + tok;
			const typename D::T *qrow = q + ((lo + tok) * num_q_heads + h) * hd;
			for (long long c = lane; c < hd; c += 32)
				qs[warp][c] = D::load(qrow[c]) * (scale * PAGED_LOG2E);
			__syncwarp();
			float m = -PAGED_INF, l = 0.0f, o[PAGED_COLS];
			for (int i = 0; i < PAGED_COLS; i++)
				o[i] = 0.0f;
			bool bad = !table_ok;
			for (long long kb = k0; kb < k1; kb += 32) {
				const long long j = kb + lane;
				float s = -PAGED_INF;
				int page = -1;
				if (j < k1) {
					page = page_table[b * max_pages + j / ps];
					if (page >= 0 && page < num_pages) {
						const typename D::T *krow = k_pages + ((page * ps + j % ps) * hkv + hk) * hd;
						float acc = 0.0f;
						for (long long c = 0; c < hd; c++)
							acc = fmaf(qs[warp][c], D::load(krow[c]), acc);
						s = j <= last ? acc : -PAGED_INF;
					} else {
						bad = true;
					}
				}
				const float mnew = fmaxf(m, paged_warp_max(s));
				const float p = s == -PAGED_INF ? 0.0f : exp2f(s - mnew);
				const float alpha = m == -PAGED_INF ? 0.0f : exp2f(m - mnew);
				l = l * alpha + warp_sum(p);
				for (int i = 0; i < PAGED_COLS; i++)
					o[i] *= alpha;
				for (int jj = 0; jj < 32 && kb + jj < k1; jj++) {
					const float pj = __shfl_sync(0xffffffffu, p, jj);
					const int pg = __shfl_sync(0xffffffffu, page, jj);
					if (pj == 0.0f || pg < 0 || pg >= num_pages)
						continue;
					const typename D::T *vrow = v_pages + ((pg * ps + (kb + jj) % ps) * hkv + hk) * hd;
					for (int i = 0; i < PAGED_COLS; i++)
						if (lane + 32 * i < hd)
							o[i] = fmaf(pj, D::load(vrow[lane + 32 * i]), o[i]);
				}
				m = mnew;
			}
			bad = __any_sync(0xffffffffu, bad);
			const long long row = (split * total_q + lo + tok) * num_q_heads + h;
			for (int i = 0; i < PAGED_COLS; i++)
				if (lane + 32 * i < hd)
					partial_o[row * hd + lane + 32 * i] = o[i];
			if (lane == 0) {
				partial_ml[2 * row] = bad ? PAGED_NAN : m;
				partial_ml[2 * row + 1] = bad ? PAGED_NAN : l;
			}
			__syncwarp();
		}
	}
}

template <class D> __device__ void paged_combine(DATAFLOW_PAGED_ATTENTION_COMBINE_PARAMS(typename D::T))
{
	const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
	const long long hd = head_dim, rows = total_q * num_q_heads;
	for (long long b = blockIdx.x; b < batch; b += gridDim.x) {
		long long lo, hi;
		paged_seq_range(cu_seqlens_q, b, total_q, &lo, &hi);
		for (long long row = lo * num_q_heads + warp; row < hi * num_q_heads; row += PAGED_WARPS) {
			float M = -PAGED_INF, L = 0.0f, acc[PAGED_COLS];
			bool bad = false;
			for (long long s = 0; s < num_splits; s++) {
				const float *ml = partial_ml + 2 * (s * rows + row);
				bad |= isnan(ml[1]);
				M = ml[1] > 0.0f && ml[0] > M ? ml[0] : M;
			}
			for (int i = 0; i < PAGED_COLS; i++)
				acc[i] = 0.0f;
			for (long long s = 0; s < num_splits && M > -PAGED_INF; s++) {
				const float *ml = partial_ml + 2 * (s * rows + row);
				if (!(ml[1] > 0.0f))
					continue;
				const float w = exp2f(ml[0] - M);
				for (int i = 0; i < PAGED_COLS; i++)
					if (lane + 32 * i < hd)
						acc[i] = fmaf(w, partial_o[(s * rows + row) * hd + lane + 32 * i], acc[i]);
				L = fmaf(w, ml[1], L);
			}
			const float inv = bad ? PAGED_NAN : L > 0.0f ? 1.0f / L : 0.0f;
			for (int i = 0; i < PAGED_COLS; i++)
				if (lane + 32 * i < hd)
					out[row * hd + lane + 32 * i] = D::store(acc[i] * inv);
			if (lse && lane == 0) {
				const long long tok = row / num_q_heads, h = row % num_q_heads;
				lse[h * total_q + tok] = bad ? PAGED_NAN : L > 0.0f ? (M + log2f(L)) * PAGED_LN2 : -PAGED_INF;
			}
		}
	}
}

#define PAGED_ATTENTION(DT, TAG)                                                                                  \
	extern "C" __global__ void dataflow_cuda_paged_attention_partial_##DT(                                     \
		DATAFLOW_PAGED_ATTENTION_PARTIAL_PARAMS(DT##_t))                                                   \
	{                                                                                                         \
		paged_partial<TAG>(q, k_pages, v_pages, page_table, seq_lens, cu_seqlens_q, partial_o, partial_ml, \
				   total_q, batch, num_pages, page_size, max_pages, num_q_heads, num_kv_heads,      \
				   head_dim, split_size, scale);                                                    \
	}                                                                                                         \
	extern "C" __global__ void dataflow_cuda_paged_attention_combine_##DT(                                     \
		DATAFLOW_PAGED_ATTENTION_COMBINE_PARAMS(DT##_t))                                                   \
	{                                                                                                         \
		paged_combine<TAG>(partial_o, partial_ml, cu_seqlens_q, out, lse, total_q, batch, num_q_heads,     \
				   head_dim, num_splits);                                                           \
	}

PAGED_ATTENTION(fp32, Fp32)
PAGED_ATTENTION(fp16, Fp16)
PAGED_ATTENTION(bf16, Bf16)
