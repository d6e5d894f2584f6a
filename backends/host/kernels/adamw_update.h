#ifndef DATAFLOW_HOST_KERNELS_ADAMW_UPDATE_H
#define DATAFLOW_HOST_KERNELS_ADAMW_UPDATE_H

/* One AdamW update in fp32, shared by the three ways of storing its state (adamw_step: fp32,
 * adamw_step_bf16_state: bf16, adamw_step_8bit: blockwise 8-bit), so that every storage runs
 * the same arithmetic: torch.optim.AdamW (decoupled weight decay, bias correction), torch's
 * _single_tensor_adam order in fp32:
 *   g = grad * scale;  p = p * decay
 *   m = lerp(m, g, w1)                    = fma(w1, g - m, m), or fma(w1 - 1, g - m, g) if w1 >= 0.5
 *   v = fma(c2 * g, g, v * beta2)
 *   p = p + (neg_step_size * m) / (sqrt(v) / bc2_sqrt + eps)
 * torch's CPU kernels use fma for lerp and addcmul, so do we, explicitly, on every path
 * (fmaf on the scalar path): every SIMD level gives the same bits, and the bits match torch
 * except where its vectorized sqrt is not correctly rounded (ours is). Constants are formed
 * in double and rounded once to fp32, as torch rounds its Python-float scalars. */
#include <math.h>

#include "simd_dtype.h"

typedef struct {
	float scale, decay, w, beta2, c2, neg_step_size, bc2_sqrt, eps;
	int lerp_small; /* w1 < 0.5: torch's lerp steps from m (w = w1), else from g (w = w1 - 1) */
} Adamw_Constants;

static inline Adamw_Constants adamw_constants(double lr, double beta1, double beta2, double eps, double weight_decay,
					      int64_t step, const float *scale)
{
	double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
	float w1 = (float)(1.0 - beta1);
	int lerp_small = fabsf(w1) < 0.5f;
	return (Adamw_Constants){
		.scale = scale ? scale[0] : 1.0f,
		.decay = (float)(1.0 - lr * weight_decay),
		.w = lerp_small ? w1 : w1 - 1.0f,
		.beta2 = (float)beta2,
		.c2 = (float)(1.0 - beta2),
		.neg_step_size = (float)(-(lr / bc1)),
		.bc2_sqrt = (float)sqrt(bc2),
		.eps = (float)eps,
		.lerp_small = lerp_small,
	};
}

/* The element update: p (already the master or the widened param), m, v in place, from g. */
SIMD_INLINE void adamw_update1(const Adamw_Constants *a, float g, float *p, float *m, float *v)
{
	if (a->scale != 1.0f)
		g = g * a->scale;
	float x = *p * a->decay;
	float mi = fmaf(a->w, g - *m, a->lerp_small ? *m : g);
	float vi = fmaf(a->c2 * g, g, *v * a->beta2);
	*p = x + (a->neg_step_size * mi) / (sqrtf(vi) / a->bc2_sqrt + a->eps);
	*m = mi;
	*v = vi;
}

/* The same on VL_##isa lanes, and the loop over elements [j, len) whose m and v are fp32 arrays
 * (param, grad, master, m, v all pointing at element 0 of the range): it runs the whole
 * vectors and returns where it stopped; adamw_fp32_state_scalar finishes. */
#define ADAMW_UPDATE_VECTOR(isa)                                                                     \
	SIMD_ISA_INLINE(isa) void adamw_update_##isa(const Adamw_Constants *a, Vf_##isa g, Vf_##isa *p,   \
						      Vf_##isa *m, Vf_##isa *v)                           \
	{                                                                                            \
		if (a->scale != 1.0f)                                                                \
			g = g * vset1_##isa(a->scale);                                               \
		Vf_##isa x = *p * vset1_##isa(a->decay);                                             \
		Vf_##isa mi = vfma_##isa(vset1_##isa(a->w), g - *m, a->lerp_small ? *m : g);         \
		Vf_##isa vi = vfma_##isa(vset1_##isa(a->c2) * g, g, *v * vset1_##isa(a->beta2));     \
		*p = x + (vset1_##isa(a->neg_step_size) * mi) /                                      \
				 (vsqrt_##isa(vi) / vset1_##isa(a->bc2_sqrt) + vset1_##isa(a->eps));  \
		*m = mi;                                                                             \
		*v = vi;                                                                             \
	}                                                                                            \
	SIMD_ISA_INLINE(isa) int64_t adamw_fp32_state_##isa(const Adamw_Constants *a, DataflowDatatype pt,     \
							    DataflowDatatype gt, void *param, const void *grad, \
							    float *master, float *m, float *v, int64_t j,       \
							    int64_t len)                                        \
	{                                                                                            \
		for (; j + VL_##isa <= len; j += VL_##isa) {                                         \
			Vf_##isa p = master ? vloadf_##isa(master + j) : vload_##isa(param, j, pt);   \
			Vf_##isa mi = vloadf_##isa(m + j), vi = vloadf_##isa(v + j);                  \
			adamw_update_##isa(a, vload_##isa(grad, j, gt), &p, &mi, &vi);               \
			vstoref_##isa(m + j, mi);                                                    \
			vstoref_##isa(v + j, vi);                                                    \
			if (master)                                                                  \
				vstoref_##isa(master + j, p);                                        \
			vstore_##isa(param, j, p, pt);                                               \
		}                                                                                    \
		return j;                                                                            \
	}
SIMD_EACH_ISA(ADAMW_UPDATE_VECTOR)

SIMD_INLINE int64_t adamw_fp32_state_scalar(const Adamw_Constants *a, DataflowDatatype pt, DataflowDatatype gt,
					    void *param, const void *grad, float *master, float *m, float *v,
					    int64_t j, int64_t len)
{
	for (; j < len; j++) {
		float p = master ? master[j] : simd_load1(param, j, pt);
		adamw_update1(a, simd_load1(grad, j, gt), &p, &m[j], &v[j]);
		if (master)
			master[j] = p;
		simd_store1(param, j, p, pt);
	}
	return j;
}

/* name_<path>: adamw_fp32_state_<path> for this param and grad storage, as a function of its own */
#define ADAMW_FP32_STATE_PATH(path, name, pt, gt)                                                    \
	SIMD_TARGET_##path static int64_t name##_##path(const Adamw_Constants *a, void *param, const void *grad, \
							float *master, float *m, float *v, int64_t j, int64_t len) \
	{                                                                                            \
		return adamw_fp32_state_##path(a, pt, gt, param, grad, master, m, v, j, len);        \
	}

/* VARIANT(op_<param>_<grad>, param dtype, grad dtype) for each of the variants every adamw op
 * has (param fp32 or bf16, grad fp32 or bf16). */
#define ADAMW_EACH_VARIANT(VARIANT, op)                                                              \
	VARIANT(op##_fp32_fp32, DATAFLOW_FP32, DATAFLOW_FP32)                                        \
	VARIANT(op##_fp32_bf16, DATAFLOW_FP32, DATAFLOW_BF16)                                        \
	VARIANT(op##_bf16_fp32, DATAFLOW_BF16, DATAFLOW_FP32)                                        \
	VARIANT(op##_bf16_bf16, DATAFLOW_BF16, DATAFLOW_BF16)

/* The start of every adamw kernel (void kernel(void **args, int part, int num_parts)): declares x,
 * the op's arguments (unpack(args)), this part's elements [i, end) in whole blocks of align, and
 * a, the step's constants. */
#define ADAMW_PART_BEGIN(Args, unpack, align)                                                        \
	Args x = unpack(args);                                                                       \
	int64_t i, end;                                                                              \
	dataflow_part_range(x.n, part, num_parts, align, &i, &end);                                  \
	Adamw_Constants a = adamw_constants(x.lr, x.beta1, x.beta2, x.eps, x.weight_decay, x.step, x.scale)

/* the three paths of name (ADAMW_FP32_STATE_PATH), and the best one this CPU allows run over
 * [0, len) (adamw_fp32_state's arguments after a) */
#define ADAMW_FP32_STATE_PATHS(name, pt, gt)                                                         \
	ADAMW_FP32_STATE_PATH(avx512, name, pt, gt)                                                  \
	ADAMW_FP32_STATE_PATH(avx2, name, pt, gt)                                                    \
	ADAMW_FP32_STATE_PATH(scalar, name, pt, gt)
#define ADAMW_FP32_STATE_RUN(name, a, param, grad, master, m, v, len)                                \
	do {                                                                                         \
		int64_t j_ = 0;                                                                      \
		int level_ = simd_level();                                                           \
		if (level_ == SIMD_AVX512)                                                           \
			j_ = name##_avx512(a, param, grad, master, m, v, j_, len);                   \
		else if (level_ == SIMD_AVX2)                                                        \
			j_ = name##_avx2(a, param, grad, master, m, v, j_, len);                     \
		name##_scalar(a, param, grad, master, m, v, j_, len); /* the tail, or all */         \
	} while (0)

/* element i of an array of dtype dt */
static inline void *adamw_at(const void *p, int64_t i, DataflowDatatype dt)
{
	return p ? (char *)p + i * (int64_t)dataflow_datatype_size(dt) : NULL;
}

#endif
