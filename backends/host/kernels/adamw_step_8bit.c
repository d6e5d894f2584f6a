/* adamw_step_8bit: AdamW with blockwise 8-bit m and v (Dettmers et al. 2021). Per block of
 * DATAFLOW_ADAMW_8BIT_BLOCK elements: the codes dequantized into fp32 scratch, the fp32
 * update of adamw_update.h over it (vectorized: param, grad and master straight from memory),
 * then the block's new absmax and the nearest code of every element (a binary search over
 * the midpoints of the sorted code table). Parts are whole blocks, so any split over
 * threads gives the same bits. */
#include "adamw_update.h"
#include "dataflow/default_ops.h"
#include "dataflow/op_args.h"

#define BLOCK DATAFLOW_ADAMW_8BIT_BLOCK
#define PART_MIN 16384

/* The code of x is the number of scaled midpoints below it, ((q[j] + q[j + 1]) * 0.5f) * absmax
 * (the nearest code; a tie goes down), over the block's 255 midpoints (a prefix of them lies
 * below x), formed once per block and padded with +Inf to 256. The vector paths count in two
 * levels: the 16-midpoint segment from the 15 segment ends (mid[16 i + 15]) below x, then the
 * midpoints below x inside that segment (one compare each, a popcount); the scalar path does a
 * branchless binary search. Exact comparisons: the same codes on every path. */
#define CODES (DATAFLOW_ADAMW_8BIT_CODES)

typedef struct {
	float mid[CODES];      /* [255] = +Inf */
	float ends[16];        /* mid[16 i + 15], i < 15; [15] = +Inf */
} Midpoints;

SIMD_TARGET_AVX512 static int64_t nearest_codes_avx512(const Midpoints *t, const float *s, int64_t len, uint8_t *codes)
{
	__m512 ends = _mm512_loadu_ps(t->ends);
	for (int64_t j = 0; j < len; j++) {
		__m512 x = _mm512_set1_ps(s[j]);
		int seg = __builtin_popcount(_mm512_cmp_ps_mask(x, ends, _CMP_GT_OQ));
		__m512 fine = _mm512_loadu_ps(t->mid + 16 * seg);
		codes[j] = (uint8_t)(16 * seg + __builtin_popcount(_mm512_cmp_ps_mask(x, fine, _CMP_GT_OQ)));
	}
	return len;
}

SIMD_TARGET_AVX2 static int64_t nearest_codes_avx2(const Midpoints *t, const float *s, int64_t len, uint8_t *codes)
{
	__m256 ends_lo = _mm256_loadu_ps(t->ends), ends_hi = _mm256_loadu_ps(t->ends + 8);
	for (int64_t j = 0; j < len; j++) {
		__m256 x = _mm256_set1_ps(s[j]);
		int seg = __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_cmp_ps(x, ends_lo, _CMP_GT_OQ))) +
			  __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_cmp_ps(x, ends_hi, _CMP_GT_OQ)));
		const float *fine = t->mid + 16 * seg;
		int below = __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_loadu_ps(fine), _CMP_GT_OQ))) +
			    __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_loadu_ps(fine + 8), _CMP_GT_OQ)));
		codes[j] = (uint8_t)(16 * seg + below);
	}
	return len;
}

/* Requantizes len values of s into codes; returns their absmax. */
static float requantize(const float *q, const float *s, int64_t len, uint8_t *codes)
{
	Midpoints t;
	float absmax = 0.0f;
	for (int64_t j = 0; j < len; j++) {
		float a = fabsf(s[j]);
		absmax = a > absmax ? a : absmax;
	}
	for (int j = 0; j < CODES - 1; j++)
		t.mid[j] = ((q[j] + q[j + 1]) * 0.5f) * absmax;
	t.mid[CODES - 1] = INFINITY;
	for (int i = 0; i < 16; i++)
		t.ends[i] = t.mid[16 * i + 15];
	int level = simd_level();
	int64_t j = level == SIMD_AVX512 ? nearest_codes_avx512(&t, s, len, codes)
		    : level == SIMD_AVX2 ? nearest_codes_avx2(&t, s, len, codes)
					 : 0;
	for (; j < len; j++) { /* no vector path */
		int below = 0;
		for (int step = CODES / 2; step > 0; step >>= 1)
			below += step & -(int)(s[j] > t.mid[below + step - 1]);
		codes[j] = (uint8_t)below;
	}
	return absmax;
}

#define Q8_VARIANT(name, pt, gt)                                                                     \
	ADAMW_FP32_STATE_PATHS(name, pt, gt)                                                         \
	void dataflow_host_##name(void **args, int part, int num_parts)                              \
	{                                                                                            \
		ADAMW_PART_BEGIN(Dataflow_Adamw_Step_8bit_Args, dataflow_adamw_step_8bit_args, BLOCK); \
		float m[BLOCK], v[BLOCK];                                                            \
		for (; i < end; i += BLOCK) {                                                        \
			int64_t k = i / BLOCK, len = end - i < BLOCK ? end - i : BLOCK;              \
			for (int64_t e = 0; e < len; e++) {                                          \
				m[e] = x.qmap_m[x.m[i + e]] * x.m_absmax[k];                         \
				v[e] = x.qmap_v[x.v[i + e]] * x.v_absmax[k];                         \
			}                                                                            \
			ADAMW_FP32_STATE_RUN(name, &a, adamw_at(x.param, i, pt), adamw_at(x.grad, i, gt), \
					     x.master ? x.master + i : NULL, m, v, len);                     \
			x.m_absmax[k] = requantize(x.qmap_m, m, len, x.m + i);                       \
			x.v_absmax[k] = requantize(x.qmap_v, v, len, x.v + i);                       \
		}                                                                                    \
	}

ADAMW_EACH_VARIANT(Q8_VARIANT, adamw_step_8bit)

DATAFLOW_HOST_ELEMENTWISE_LAUNCH(dataflow_host_adamw_step_8bit_launch, Dataflow_Adamw_Step_8bit_Args,
				 dataflow_adamw_step_8bit_args, PART_MIN)
