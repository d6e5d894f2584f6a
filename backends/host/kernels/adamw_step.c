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
#include "simd.h"

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

/* One body per vector width: P_BF16 / G_BF16 select the storage of param and grad. */
#define ADAMW_VECTOR_BODY(W, VEC, LOADU, STOREU, LOAD_BF16, STORE_BF16, SET1, MUL, SUB, ADD, DIV, SQRT, FMA)  \
	VEC scale = SET1(a.scale), decay = SET1(a.decay), w1 = SET1(a.lerp_small ? a.w1 : a.w1 - 1.0f);           \
	VEC beta2 = SET1(a.beta2), c2 = SET1(a.c2), nss = SET1(a.neg_step_size), bc2s = SET1(a.bc2_sqrt);         \
	VEC eps = SET1(a.eps);                                                                                     \
	for (; i + W <= end; i += W) {                                                                             \
		VEC g = G_BF16 ? LOAD_BF16((const uint16_t *)a.grad + i) : LOADU((const float *)a.grad + i);    \
		if (a.scale != 1.0f)                                                                               \
			g = MUL(g, scale);                                                                         \
		VEC p = a.master ? LOADU(a.master + i)                                                             \
				 : P_BF16 ? LOAD_BF16((const uint16_t *)a.param + i) : LOADU((float *)a.param + i); \
		p = MUL(p, decay);                                                                                 \
		VEC m = LOADU(a.m + i), v = LOADU(a.v + i);                                                        \
		m = FMA(w1, SUB(g, m), a.lerp_small ? m : g);                                                      \
		v = FMA(MUL(c2, g), g, MUL(v, beta2));                                                             \
		p = ADD(p, DIV(MUL(nss, m), ADD(DIV(SQRT(v), bc2s), eps)));                                        \
		STOREU(a.m + i, m);                                                                                \
		STOREU(a.v + i, v);                                                                                \
		if (a.master)                                                                                      \
			STOREU(a.master + i, p);                                                                   \
		if (P_BF16)                                                                                        \
			STORE_BF16((uint16_t *)a.param + i, p);                                                    \
		else                                                                                               \
			STOREU((float *)a.param + i, p);                                                           \
	}                                                                                                          \
	return i;

#define ADAMW_AVX512_BODY                                                                                       \
	ADAMW_VECTOR_BODY(16, __m512, _mm512_loadu_ps, _mm512_storeu_ps, simd_load_bf16_avx512,                 \
			  simd_store_bf16_avx512, _mm512_set1_ps, _mm512_mul_ps, _mm512_sub_ps, _mm512_add_ps,  \
			  _mm512_div_ps, _mm512_sqrt_ps, _mm512_fmadd_ps)
#define ADAMW_AVX2_BODY                                                                                         \
	ADAMW_VECTOR_BODY(8, __m256, _mm256_loadu_ps, _mm256_storeu_ps, simd_load_bf16_avx2,                    \
			  simd_store_bf16_avx2, _mm256_set1_ps, _mm256_mul_ps, _mm256_sub_ps, _mm256_add_ps,    \
			  _mm256_div_ps, _mm256_sqrt_ps, _mm256_fmadd_ps)

static float load_any(const void *x, int bf16, int64_t i)
{
	return bf16 ? dataflow_bf16_to_fp32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

static void adamw_scalar(Adamw a, int P_BF16, int G_BF16, int64_t i, int64_t end)
{
	float w1 = a.lerp_small ? a.w1 : a.w1 - 1.0f;
	for (; i < end; i++) {
		float g = load_any(a.grad, G_BF16, i);
		if (a.scale != 1.0f)
			g = g * a.scale;
		float p = a.master ? a.master[i] : load_any(a.param, P_BF16, i);
		p = p * a.decay;
		float m = a.m[i], v = a.v[i];
		m = fmaf(w1, g - m, a.lerp_small ? m : g);
		v = fmaf(a.c2 * g, g, v * a.beta2);
		p = p + (a.neg_step_size * m) / (sqrtf(v) / a.bc2_sqrt + a.eps);
		a.m[i] = m;
		a.v[i] = v;
		if (a.master)
			a.master[i] = p;
		if (P_BF16)
			((uint16_t *)a.param)[i] = dataflow_fp32_to_bf16(p);
		else
			((float *)a.param)[i] = p;
	}
}

#define ADAMW_VARIANT(NAME, PB, GB)                                                                       \
	SIMD_TARGET_AVX512 static int64_t NAME##_avx512(Adamw a, int64_t i, int64_t end)                 \
	{                                                                                                 \
		enum { P_BF16 = PB, G_BF16 = GB };                                                        \
		ADAMW_AVX512_BODY                                                                         \
	}                                                                                                 \
	SIMD_TARGET_AVX2 static int64_t NAME##_avx2(Adamw a, int64_t i, int64_t end)                     \
	{                                                                                                 \
		enum { P_BF16 = PB, G_BF16 = GB };                                                        \
		ADAMW_AVX2_BODY                                                                           \
	}                                                                                                 \
	void dataflow_host_##NAME(void **args, int part, int num_parts)                                   \
	{                                                                                                 \
		int64_t i, end;                                                                           \
		Dataflow_Adamw_Step_Args x = dataflow_adamw_step_args(args);                              \
		dataflow_part_range(x.n, part, num_parts, PART_ALIGN, &i, &end);                          \
		Adamw a = adamw_args(&x);                                                                 \
		int level = simd_level();                                                                 \
		if (level == SIMD_AVX512)                                                                 \
			i = NAME##_avx512(a, i, end);                                                     \
		else if (level == SIMD_AVX2)                                                              \
			i = NAME##_avx2(a, i, end);                                                       \
		adamw_scalar(a, PB, GB, i, end);                                                          \
	}

ADAMW_VARIANT(adamw_step_fp32_fp32, 0, 0)
ADAMW_VARIANT(adamw_step_fp32_bf16, 0, 1)
ADAMW_VARIANT(adamw_step_bf16_fp32, 1, 0)
ADAMW_VARIANT(adamw_step_bf16_bf16, 1, 1)

DATAFLOW_HOST_ELEMENTWISE_LAUNCH(dataflow_host_adamw_step_launch, Dataflow_Adamw_Step_Args, dataflow_adamw_step_args,
				 PART_MIN)
