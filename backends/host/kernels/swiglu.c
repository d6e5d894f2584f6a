/* swiglu forward and backward, elementwise in fp32. The sigmoid takes e = exp(-|g|) (the
 * exp of simd_exp.h, which never overflows), s = (g < 0 ? e : 1) / (1 + e):
 *   forward:  silu = (g < 0 ? g * e : g) / (1 + e)   (for g >= 0 torch's g / (1 + exp(-g)))
 *             out = to_dtype(to_dtype(silu) * up)
 *             silu rounded to the dtype before the multiply, as F.silu(gate) * up in
 *             bf16/fp16 (Hugging Face LlamaMLP).
 *   backward: d_up = d_out * silu,  d_gate = ((d_out * up) * s) * (1 + g * (1 - s)),
 *             each rounded once.
 * Each element's inputs are read before its outputs are written, so outputs may alias
 * inputs. Every path does the same fp32 operations, so gives the same bits. */
#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "simd_dtype.h"
#include "simd_exp.h"

/* parts are multiples of 64 elements (whole cache lines) and at least 32 KiB of output */
#define PART_ALIGN 64
#define PART_MIN_BYTES 32768

/* exp(-|g|): the sign bit set, then simd_exp.h */
#define EXP_NEG_ABS(isa)                                                                             \
	SIMD_ISA_INLINE(isa) Vf_##isa exp_neg_abs_##isa(Vf_##isa g)                                       \
	{                                                                                            \
		return simd_exp_nonpos_##isa((Vf_##isa)((Vu_##isa)g | 0x80000000u));                 \
	}
SIMD_EACH_ISA(EXP_NEG_ABS)

/* ---- forward ---- */

typedef Dataflow_Swiglu_Args Swiglu_Args;

SIMD_INLINE void swiglu_scalar(const Swiglu_Args *a, int64_t i, int64_t end, DataflowDatatype dt)
{
	for (; i < end; i++) {
		float g = simd_load1(a->gate, i, dt), e = simd_exp_nonpos(-fabsf(g));
		float act = simd_round1((g < 0.0f ? g * e : g) / (1.0f + e), dt);
		simd_store1(a->out, i, act * simd_load1(a->up, i, dt), dt);
	}
}

#define SWIGLU_VECTOR(isa)                                                                           \
	SIMD_ISA_INLINE(isa) void swiglu_##isa(const Swiglu_Args *a, int64_t i, int64_t end, DataflowDatatype dt) \
	{                                                                                            \
		for (; i + VL_##isa <= end; i += VL_##isa) {                                         \
			Vf_##isa g = vload_##isa(a->gate, i, dt), e = exp_neg_abs_##isa(g);          \
			Vm_##isa neg = vcmp_##isa(g, vset1_##isa(0.0f), _CMP_LT_OQ);                 \
			Vf_##isa act = vround_##isa(vselect_##isa(neg, g * e, g) / (1.0f + e), dt);  \
			vstore_##isa(a->out, i, act * vload_##isa(a->up, i, dt), dt);                \
		}                                                                                    \
		swiglu_scalar(a, i, end, dt); /* the tail */                                         \
	}
SIMD_EACH_ISA(SWIGLU_VECTOR)

/* ---- backward ---- */

typedef Dataflow_Swiglu_Bwd_Args Swiglu_Bwd_Args;

SIMD_INLINE void swiglu_bwd_scalar(const Swiglu_Bwd_Args *a, int64_t i, int64_t end, DataflowDatatype dt)
{
	for (; i < end; i++) {
		float dout = simd_load1(a->d_out, i, dt), g = simd_load1(a->gate, i, dt), u = simd_load1(a->up, i, dt);
		float e = simd_exp_nonpos(-fabsf(g)), d = 1.0f + e;
		float s = (g < 0.0f ? e : 1.0f) / d, silu = (g < 0.0f ? g * e : g) / d;
		float dg = ((dout * u) * s) * (1.0f + g * (1.0f - s)), du = dout * silu;
		simd_store1(a->d_gate, i, dg, dt);
		simd_store1(a->d_up, i, du, dt);
	}
}

#define SWIGLU_BWD_VECTOR(isa)                                                                       \
	SIMD_ISA_INLINE(isa) void swiglu_bwd_##isa(const Swiglu_Bwd_Args *a, int64_t i, int64_t end,       \
						   DataflowDatatype dt)                                      \
	{                                                                                            \
		for (; i + VL_##isa <= end; i += VL_##isa) {                                         \
			Vf_##isa dout = vload_##isa(a->d_out, i, dt), g = vload_##isa(a->gate, i, dt); \
			Vf_##isa u = vload_##isa(a->up, i, dt);                                      \
			Vf_##isa e = exp_neg_abs_##isa(g), d = 1.0f + e;                             \
			Vm_##isa neg = vcmp_##isa(g, vset1_##isa(0.0f), _CMP_LT_OQ);                 \
			Vf_##isa s = vselect_##isa(neg, e, vset1_##isa(1.0f)) / d;                   \
			Vf_##isa silu = vselect_##isa(neg, g * e, g) / d;                            \
			Vf_##isa dg = ((dout * u) * s) * (1.0f + g * (1.0f - s)), du = dout * silu;  \
			vstore_##isa(a->d_gate, i, dg, dt);                                          \
			vstore_##isa(a->d_up, i, du, dt);                                            \
		}                                                                                    \
		swiglu_bwd_scalar(a, i, end, dt); /* the tail */                                     \
	}
SIMD_EACH_ISA(SWIGLU_BWD_VECTOR)

/* ---- entry points: elementwise ranges of rows * ffn ---- */

#define SWIGLU_KERNELS(name, DT)                                                                          \
	SIMD_DTYPE_KERNEL(swiglu_##name, swiglu, Swiglu_Args, DT)                                         \
	SIMD_DTYPE_KERNEL(swiglu_bwd_##name, swiglu_bwd, Swiglu_Bwd_Args, DT)                             \
	SIMD_DTYPE_ENTRY(dataflow_host_swiglu_##name, swiglu_##name, Swiglu_Args, dataflow_swiglu_args,           \
			 a.rows * a.ffn, PART_ALIGN)                                                      \
	SIMD_DTYPE_ENTRY(dataflow_host_swiglu_bwd_##name, swiglu_bwd_##name, Swiglu_Bwd_Args,                     \
			 dataflow_swiglu_bwd_args, a.rows * a.ffn, PART_ALIGN)

SWIGLU_KERNELS(fp32, DATAFLOW_FP32)
SWIGLU_KERNELS(fp16, DATAFLOW_FP16)
SWIGLU_KERNELS(bf16, DATAFLOW_BF16)

/* ---- launch (both ops: rows * ffn elements of the dtype) ---- */

static int swiglu_parts(const Op *op, int64_t rows, int64_t ffn, int tensor_arg)
{
	int64_t size = (int64_t)dataflow_datatype_size(op->skeleton.arg_dtypes[tensor_arg]);
	return dataflow_elementwise_parts(rows * ffn, PART_MIN_BYTES / size);
}

DATAFLOW_HOST_LAUNCH(dataflow_host_swiglu_launch, Swiglu_Args, dataflow_swiglu_args,
		     swiglu_parts(op, a.rows, a.ffn, DATAFLOW_SWIGLU_ARG_OUT))
DATAFLOW_HOST_LAUNCH(dataflow_host_swiglu_bwd_launch, Swiglu_Bwd_Args, dataflow_swiglu_bwd_args,
		     swiglu_parts(op, a.rows, a.ffn, DATAFLOW_SWIGLU_BWD_ARG_D_GATE))
