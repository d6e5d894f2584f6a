/* adamw_step: torch.optim.AdamW (decoupled weight decay, bias correction), torch's
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

#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "simd_dtype.h"

/* parts are whole cache lines of m and v and at least 16 Ki elements (~200 KiB of traffic) */
#define PART_ALIGN 64
#define PART_MIN 16384

typedef struct {
	void *param;
	const void *grad;
	float *m, *v, *master;
	float scale, decay, w1, beta2, c2, neg_step_size, bc2_sqrt, eps;
	int lerp_small; /* w1 < 0.5: torch's lerp steps from m, else from g */
} Adamw;

static Adamw adamw_args(const Dataflow_Adamw_Step_Args *x)
{
	double lr = x->lr, beta1 = x->beta1, beta2 = x->beta2, eps = x->eps, wd = x->weight_decay;
	double bc1 = 1.0 - pow(beta1, (double)x->step), bc2 = 1.0 - pow(beta2, (double)x->step);
	Adamw a = {
		.param = x->param,
		.grad = x->grad,
		.m = x->m,
		.v = x->v,
		.master = x->master,
		.scale = x->scale ? x->scale[0] : 1.0f,
		.decay = (float)(1.0 - lr * wd),
		.w1 = (float)(1.0 - beta1),
		.beta2 = (float)beta2,
		.c2 = (float)(1.0 - beta2),
		.neg_step_size = (float)(-(lr / bc1)),
		.bc2_sqrt = (float)sqrt(bc2),
		.eps = (float)eps,
	};
	a.lerp_small = fabsf(a.w1) < 0.5f;
	return a;
}

/* [i, end) with param stored as pt and grad as gt (fp32 or bf16), from the vector body or
 * the scalar loop; each returns where it stopped */
#define ADAMW_VECTOR(isa)                                                                            \
	SIMD_ISA_INLINE(isa) int64_t adamw_##isa(Adamw a, DataflowDatatype pt, DataflowDatatype gt, int64_t i, \
						 int64_t end)                                                \
	{                                                                                            \
		Vf_##isa scale = vset1_##isa(a.scale), decay = vset1_##isa(a.decay);                 \
		Vf_##isa w1 = vset1_##isa(a.lerp_small ? a.w1 : a.w1 - 1.0f);                        \
		Vf_##isa beta2 = vset1_##isa(a.beta2), c2 = vset1_##isa(a.c2);                       \
		Vf_##isa nss = vset1_##isa(a.neg_step_size), bc2s = vset1_##isa(a.bc2_sqrt);         \
		Vf_##isa eps = vset1_##isa(a.eps);                                                   \
		for (; i + VL_##isa <= end; i += VL_##isa) {                                         \
			Vf_##isa g = vload_##isa(a.grad, i, gt);                                     \
			if (a.scale != 1.0f)                                                         \
				g = g * scale;                                                       \
			Vf_##isa p = a.master ? vloadf_##isa(a.master + i) : vload_##isa(a.param, i, pt); \
			p = p * decay;                                                               \
			Vf_##isa m = vloadf_##isa(a.m + i), v = vloadf_##isa(a.v + i);               \
			m = vfma_##isa(w1, g - m, a.lerp_small ? m : g);                             \
			v = vfma_##isa(c2 * g, g, v * beta2);                                        \
			p = p + (nss * m) / (vsqrt_##isa(v) / bc2s + eps);                           \
			vstoref_##isa(a.m + i, m);                                                   \
			vstoref_##isa(a.v + i, v);                                                   \
			if (a.master)                                                                \
				vstoref_##isa(a.master + i, p);                                      \
			vstore_##isa(a.param, i, p, pt);                                             \
		}                                                                                    \
		return i;                                                                            \
	}
SIMD_EACH_ISA(ADAMW_VECTOR)

SIMD_INLINE int64_t adamw_scalar(Adamw a, DataflowDatatype pt, DataflowDatatype gt, int64_t i, int64_t end)
{
	float w1 = a.lerp_small ? a.w1 : a.w1 - 1.0f;
	for (; i < end; i++) {
		float g = simd_load1(a.grad, i, gt);
		if (a.scale != 1.0f)
			g = g * a.scale;
		float p = a.master ? a.master[i] : simd_load1(a.param, i, pt);
		p = p * a.decay;
		float m = a.m[i], v = a.v[i];
		m = fmaf(w1, g - m, a.lerp_small ? m : g);
		v = fmaf(a.c2 * g, g, v * a.beta2);
		p = p + (a.neg_step_size * m) / (sqrtf(v) / a.bc2_sqrt + a.eps);
		a.m[i] = m;
		a.v[i] = v;
		if (a.master)
			a.master[i] = p;
		simd_store1(a.param, i, p, pt);
	}
	return i;
}

/* name_<path>: the path's body for this param and grad storage */
#define ADAMW_PATH(path, name, pt, gt)                                                               \
	SIMD_TARGET_##path static int64_t name##_##path(Adamw a, int64_t i, int64_t end)               \
	{                                                                                            \
		return adamw_##path(a, pt, gt, i, end);                                              \
	}

#define ADAMW_VARIANT(name, pt, gt)                                                                  \
	ADAMW_PATH(avx512, name, pt, gt)                                                             \
	ADAMW_PATH(avx2, name, pt, gt)                                                               \
	ADAMW_PATH(scalar, name, pt, gt)                                                             \
	void dataflow_host_##name(void **args, int part, int num_parts)                              \
	{                                                                                            \
		int64_t i, end;                                                                      \
		Dataflow_Adamw_Step_Args x = dataflow_adamw_step_args(args);                         \
		dataflow_part_range(x.n, part, num_parts, PART_ALIGN, &i, &end);                     \
		Adamw a = adamw_args(&x);                                                            \
		int level = simd_level();                                                            \
		if (level == SIMD_AVX512)                                                            \
			i = name##_avx512(a, i, end);                                                \
		else if (level == SIMD_AVX2)                                                         \
			i = name##_avx2(a, i, end);                                                  \
		name##_scalar(a, i, end); /* the tail, or all */                                     \
	}

ADAMW_VARIANT(adamw_step_fp32_fp32, DATAFLOW_FP32, DATAFLOW_FP32)
ADAMW_VARIANT(adamw_step_fp32_bf16, DATAFLOW_FP32, DATAFLOW_BF16)
ADAMW_VARIANT(adamw_step_bf16_fp32, DATAFLOW_BF16, DATAFLOW_FP32)
ADAMW_VARIANT(adamw_step_bf16_bf16, DATAFLOW_BF16, DATAFLOW_BF16)

DATAFLOW_HOST_ELEMENTWISE_LAUNCH(dataflow_host_adamw_step_launch, Dataflow_Adamw_Step_Args, dataflow_adamw_step_args,
				 PART_MIN)
