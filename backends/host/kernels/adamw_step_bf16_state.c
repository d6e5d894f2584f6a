/* adamw_step_bf16_state: AdamW with bf16 m and v, updated in fp32 (adamw_update.h) and stored
 * with stochastic rounding: bits + (r & 0xffff), the low half dropped, r a counter-based hash
 * of (seed, step, element, m or v) (the catalogue's doc has the exact words), so the bits do
 * not depend on how the elements are split over threads or SIMD lanes. */
#include "adamw_update.h"
#include "dataflow/op_args.h"

#define PART_ALIGN 64
#define PART_MIN 16384

/* lowbias32 (C. Wellons' hash search): a bijection of uint32 with good avalanche */
#define SR_MIX(x)                                                                                    \
	do {                                                                                         \
		(x) ^= (x) >> 16;                                                                    \
		(x) *= 0x7feb352du;                                                                  \
		(x) ^= (x) >> 15;                                                                    \
		(x) *= 0x846ca68bu;                                                                  \
		(x) ^= (x) >> 16;                                                                    \
	} while (0)

static inline uint32_t sr_mix(uint32_t x)
{
	SR_MIX(x);
	return x;
}

typedef struct {
	uint32_t m, v;
} Sr_Keys;

static Sr_Keys sr_keys(uint64_t seed, int64_t step)
{
	uint64_t s = (uint64_t)step;
	uint32_t key = sr_mix((uint32_t)seed ^ sr_mix((uint32_t)(seed >> 32) ^ sr_mix((uint32_t)s ^ sr_mix((uint32_t)(s >> 32)))));
	return (Sr_Keys){sr_mix(key ^ 1u), sr_mix(key ^ 2u)};
}

/* x rounded to bf16 (as the fp32 with the low half zero) by r; NaN to nearest even */
SIMD_INLINE float sr_round1(float x, uint32_t r)
{
	if (isnan(x))
		return x;
	uint32_t u;
	memcpy(&u, &x, 4);
	u = (u + (r & 0xffffu)) & 0xffff0000u;
	memcpy(&x, &u, 4);
	return x;
}

SIMD_INLINE uint32_t sr_word(uint32_t key, int64_t i)
{
	uint32_t x = (uint32_t)i ^ key;
	SR_MIX(x);
	x += (uint32_t)((uint64_t)i >> 32);
	SR_MIX(x);
	return x;
}

/* [j, len) of the range starting at element i0 (whose indices the random words take) */
#define SR_VECTOR(isa)                                                                               \
	SIMD_ISA_INLINE(isa) Vf_##isa sr_round_##isa(Vf_##isa x, Vu_##isa r)                              \
	{                                                                                            \
		Vf_##isa y = (Vf_##isa)((((Vu_##isa)x) + (r & 0xffffu)) & 0xffff0000u);              \
		return vselect_##isa(vcmp_##isa(x, x, _CMP_UNORD_Q), x, y);                          \
	}                                                                                            \
	SIMD_ISA_INLINE(isa) Vu_##isa sr_word_##isa(uint32_t key, Vu_##isa lo, Vu_##isa hi)              \
	{                                                                                            \
		Vu_##isa x = lo ^ key;                                                               \
		SR_MIX(x);                                                                           \
		x += hi;                                                                             \
		SR_MIX(x);                                                                           \
		return x;                                                                            \
	}                                                                                            \
	SIMD_ISA_INLINE(isa) int64_t adamw_bf16_state_##isa(const Adamw_Constants *a, Sr_Keys k,         \
							    DataflowDatatype pt, DataflowDatatype gt, void *param, \
							    const void *grad, float *master, uint16_t *m,          \
							    uint16_t *v, int64_t i0, int64_t j, int64_t len)        \
	{                                                                                            \
		Vu_##isa lane;                                                                       \
		for (int l = 0; l < VL_##isa; l++)                                                   \
			lane[l] = (uint32_t)l;                                                       \
		for (; j + VL_##isa <= len; j += VL_##isa) {                                         \
			uint64_t base = (uint64_t)(i0 + j);                                          \
			Vu_##isa lo = lane + (uint32_t)base;                                         \
			Vu_##isa hi = (uint32_t)(base >> 32) - (Vu_##isa)(lo < (uint32_t)base);      \
			Vf_##isa p = master ? vloadf_##isa(master + j) : vload_##isa(param, j, pt);   \
			Vf_##isa mi = vload_##isa(m, j, DATAFLOW_BF16), vi = vload_##isa(v, j, DATAFLOW_BF16); \
			adamw_update_##isa(a, vload_##isa(grad, j, gt), &p, &mi, &vi);               \
			vstore_##isa(m, j, sr_round_##isa(mi, sr_word_##isa(k.m, lo, hi)), DATAFLOW_BF16); \
			vstore_##isa(v, j, sr_round_##isa(vi, sr_word_##isa(k.v, lo, hi)), DATAFLOW_BF16); \
			if (master)                                                                  \
				vstoref_##isa(master + j, p);                                        \
			vstore_##isa(param, j, p, pt);                                               \
		}                                                                                    \
		return j;                                                                            \
	}
SIMD_EACH_ISA(SR_VECTOR)

SIMD_INLINE int64_t adamw_bf16_state_scalar(const Adamw_Constants *a, Sr_Keys k, DataflowDatatype pt,
					    DataflowDatatype gt, void *param, const void *grad, float *master,
					    uint16_t *m, uint16_t *v, int64_t i0, int64_t j, int64_t len)
{
	for (; j < len; j++) {
		float p = master ? master[j] : simd_load1(param, j, pt);
		float mi = dataflow_bf16_to_fp32(m[j]), vi = dataflow_bf16_to_fp32(v[j]);
		adamw_update1(a, simd_load1(grad, j, gt), &p, &mi, &vi);
		m[j] = dataflow_fp32_to_bf16(sr_round1(mi, sr_word(k.m, i0 + j)));
		v[j] = dataflow_fp32_to_bf16(sr_round1(vi, sr_word(k.v, i0 + j)));
		if (master)
			master[j] = p;
		simd_store1(param, j, p, pt);
	}
	return j;
}

#define SR_PATH(path, name, pt, gt)                                                                  \
	SIMD_TARGET_##path static int64_t name##_##path(const Adamw_Constants *a, Sr_Keys k, void *param,  \
							const void *grad, float *master, uint16_t *m, uint16_t *v, \
							int64_t i0, int64_t j, int64_t len)                        \
	{                                                                                            \
		return adamw_bf16_state_##path(a, k, pt, gt, param, grad, master, m, v, i0, j, len);  \
	}

#define SR_VARIANT(name, pt, gt)                                                                     \
	SR_PATH(avx512, name, pt, gt)                                                                \
	SR_PATH(avx2, name, pt, gt)                                                                  \
	SR_PATH(scalar, name, pt, gt)                                                                \
	void dataflow_host_##name(void **args, int part, int num_parts)                              \
	{                                                                                            \
		ADAMW_PART_BEGIN(Dataflow_Adamw_Step_Bf16_State_Args, dataflow_adamw_step_bf16_state_args, PART_ALIGN); \
		Sr_Keys k = sr_keys(x.seed, x.step);                                                 \
		void *param = adamw_at(x.param, i, pt);                                              \
		const void *grad = adamw_at(x.grad, i, gt);                                          \
		float *master = x.master ? x.master + i : NULL;                                      \
		uint16_t *m = x.m + i, *v = x.v + i;                                                 \
		int64_t len = end - i, j = 0;                                                        \
		int level = simd_level();                                                            \
		if (level == SIMD_AVX512)                                                            \
			j = name##_avx512(&a, k, param, grad, master, m, v, i, j, len);              \
		else if (level == SIMD_AVX2)                                                         \
			j = name##_avx2(&a, k, param, grad, master, m, v, i, j, len);                \
		name##_scalar(&a, k, param, grad, master, m, v, i, j, len); /* the tail, or all */   \
	}

ADAMW_EACH_VARIANT(SR_VARIANT, adamw_step_bf16_state)

DATAFLOW_HOST_ELEMENTWISE_LAUNCH(dataflow_host_adamw_step_bf16_state_launch, Dataflow_Adamw_Step_Bf16_State_Args,
				 dataflow_adamw_step_bf16_state_args, PART_MIN)
