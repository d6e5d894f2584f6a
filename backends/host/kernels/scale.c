/* scale: out = alpha * x over n elements, one fp32 product rounded once to the dtype, the
 * same operation on every path (so every path gives the same bits). out may alias x: each
 * element is read before it is written. */
#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "simd_dtype.h"

/* parts are multiples of 64 elements (whole cache lines) and at least 32 KiB of output */
#define PART_ALIGN 64
#define PART_MIN_BYTES 32768

typedef Dataflow_Scale_Args Scale_Args;

SIMD_INLINE void scale_scalar(const Scale_Args *a, int64_t i, int64_t end, DataflowDatatype dt)
{
	for (; i < end; i++)
		simd_store1(a->out, i, a->alpha * simd_load1(a->x, i, dt), dt);
}

#define SCALE_VECTOR(isa)                                                                            \
	SIMD_ISA_INLINE(isa) void scale_##isa(const Scale_Args *a, int64_t i, int64_t end, DataflowDatatype dt) \
	{                                                                                            \
		Vf_##isa alpha = vset1_##isa(a->alpha);                                              \
		for (; i + VL_##isa <= end; i += VL_##isa)                                           \
			vstore_##isa(a->out, i, alpha * vload_##isa(a->x, i, dt), dt);               \
		scale_scalar(a, i, end, dt); /* the tail */                                          \
	}
SIMD_EACH_ISA(SCALE_VECTOR)

#define SCALE_KERNEL(name, DT)                                                                       \
	SIMD_DTYPE_KERNEL(scale_##name, scale, Scale_Args, DT)                                       \
	SIMD_DTYPE_ENTRY(dataflow_host_scale_##name, scale_##name, Scale_Args, dataflow_scale_args, a.n, PART_ALIGN)

SCALE_KERNEL(fp32, DATAFLOW_FP32)
SCALE_KERNEL(fp16, DATAFLOW_FP16)
SCALE_KERNEL(bf16, DATAFLOW_BF16)

DATAFLOW_HOST_ELEMENTWISE_LAUNCH(dataflow_host_scale_launch, Scale_Args, dataflow_scale_args,
				 PART_MIN_BYTES / (int64_t)dataflow_datatype_size(op->skeleton.arg_dtypes[DATAFLOW_SCALE_ARG_OUT]))
