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

/* the index of the code nearest x / absmax: the number of midpoints below x, the midpoint
 * between codes j and j + 1 scaled as ((q[j] + q[j + 1]) * 0.5f) * absmax (a tie goes down) */
static inline uint8_t nearest_code(const float *q, float absmax, float x)
{
	int lo = 0, hi = DATAFLOW_ADAMW_8BIT_CODES - 1;
	while (lo < hi) {
		int mid = (lo + hi) >> 1;
		if (x > ((q[mid] + q[mid + 1]) * 0.5f) * absmax)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (uint8_t)lo;
}

/* requantizes len values of s into codes and returns their absmax */
static float requantize(const float *q, const float *s, int64_t len, uint8_t *codes)
{
	float absmax = 0.0f;
	for (int64_t j = 0; j < len; j++) {
		float a = fabsf(s[j]);
		absmax = a > absmax ? a : absmax;
	}
	for (int64_t j = 0; j < len; j++)
		codes[j] = nearest_code(q, absmax, s[j]);
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
