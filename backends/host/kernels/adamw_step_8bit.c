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
 * (the nearest code; a tie goes down): a binary search over the block's 255 midpoints (a prefix
 * of them lies below x), formed once per block. The comparisons are coin flips, so no branch:
 * masks on the scalar path, and VL elements at once with gathers on the vector paths (exact
 * comparisons: the same codes on every path). Each returns where it stopped. */
#define CODES (DATAFLOW_ADAMW_8BIT_CODES)

SIMD_TARGET_AVX512 static int64_t nearest_codes_avx512(const float *mid, const float *s, int64_t len, uint8_t *codes)
{
	int64_t j = 0;
	for (; j + 16 <= len; j += 16) {
		__m512 x = _mm512_loadu_ps(s + j);
		__m512i below = _mm512_setzero_si512();
		for (int step = CODES / 2; step > 0; step >>= 1) {
			__m512 t = _mm512_i32gather_ps(_mm512_add_epi32(below, _mm512_set1_epi32(step - 1)), mid, 4);
			below = _mm512_mask_add_epi32(below, _mm512_cmp_ps_mask(x, t, _CMP_GT_OQ), below, _mm512_set1_epi32(step));
		}
		_mm_storeu_si128((__m128i *)(codes + j), _mm512_cvtepi32_epi8(below));
	}
	return j;
}

SIMD_TARGET_AVX2 static int64_t nearest_codes_avx2(const float *mid, const float *s, int64_t len, uint8_t *codes)
{
	int64_t j = 0;
	for (; j + 8 <= len; j += 8) {
		__m256 x = _mm256_loadu_ps(s + j);
		__m256i below = _mm256_setzero_si256();
		for (int step = CODES / 2; step > 0; step >>= 1) {
			__m256 t = _mm256_i32gather_ps(mid, _mm256_add_epi32(below, _mm256_set1_epi32(step - 1)), 4);
			__m256i gt = _mm256_castps_si256(_mm256_cmp_ps(x, t, _CMP_GT_OQ));
			below = _mm256_add_epi32(below, _mm256_and_si256(gt, _mm256_set1_epi32(step)));
		}
		uint32_t lanes[8];
		_mm256_storeu_si256((__m256i *)lanes, below);
		for (int l = 0; l < 8; l++)
			codes[j + l] = (uint8_t)lanes[l];
	}
	return j;
}

/* Requantizes len values of s into codes; returns their absmax. */
static float requantize(const float *q, const float *s, int64_t len, uint8_t *codes)
{
	float absmax = 0.0f, mid[CODES - 1];
	for (int64_t j = 0; j < len; j++) {
		float a = fabsf(s[j]);
		absmax = a > absmax ? a : absmax;
	}
	for (int j = 0; j < CODES - 1; j++)
		mid[j] = ((q[j] + q[j + 1]) * 0.5f) * absmax;
	int level = simd_level();
	int64_t j = level == SIMD_AVX512 ? nearest_codes_avx512(mid, s, len, codes)
		    : level == SIMD_AVX2 ? nearest_codes_avx2(mid, s, len, codes)
					 : 0;
	for (; j < len; j++) { /* the tail, or all */
		int below = 0;
		for (int step = CODES / 2; step > 0; step >>= 1)
			below += step & -(int)(s[j] > mid[below + step - 1]);
		codes[j] = (uint8_t)below;
	}
	return absmax;
}

#define Q8_VARIANT(name, pt, gt)                                                                     \
	ADAMW_FP32_STATE_PATHS(name, pt, gt)                                                         \
	void dataflow_host_##name(void **args, int part, int num_parts)                              \
	{                                                                                            \
		int64_t i, end;                                                                      \
		Dataflow_Adamw_Step_8bit_Args x = dataflow_adamw_step_8bit_args(args);               \
		dataflow_part_range(x.n, part, num_parts, BLOCK, &i, &end);                          \
		Adamw_Constants a = adamw_constants(x.lr, x.beta1, x.beta2, x.eps, x.weight_decay, x.step, x.scale); \
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

Q8_VARIANT(adamw_step_8bit_fp32_fp32, DATAFLOW_FP32, DATAFLOW_FP32)
Q8_VARIANT(adamw_step_8bit_fp32_bf16, DATAFLOW_FP32, DATAFLOW_BF16)
Q8_VARIANT(adamw_step_8bit_bf16_fp32, DATAFLOW_BF16, DATAFLOW_FP32)
Q8_VARIANT(adamw_step_8bit_bf16_bf16, DATAFLOW_BF16, DATAFLOW_BF16)

DATAFLOW_HOST_ELEMENTWISE_LAUNCH(dataflow_host_adamw_step_8bit_launch, Dataflow_Adamw_Step_8bit_Args,
				 dataflow_adamw_step_8bit_args, PART_MIN)
