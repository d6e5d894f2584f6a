/* add: out = alpha * a + beta * b over n elements (axpby), fp32 arithmetic.
 * Two products and one sum, each rounded to fp32 (no fma: the build is ISO C, so the
 * compiler does not contract the scalar loop either), so every path gives the same bits.
 * fp16/bf16 are widened to fp32 in registers and the result rounded back to nearest even.
 * out may alias a or b: each element is read before it is written. Outputs of at least
 * STREAM_MIN_BYTES that do not partly overlap an input are written with streaming stores. */
#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "simd_dtype.h"
#include "stream_store.h"

/* parts are multiples of 64 elements (whole cache lines) and at least 32 KiB of output */
#define PART_ALIGN 64
#define PART_MIN_BYTES 32768

typedef Dataflow_Add_Args Add_Args;

SIMD_INLINE void add_scalar(const Add_Args *x, int64_t i, int64_t end, DataflowDatatype dt)
{
	for (; i < end; i++)
		simd_store1(x->out, i, x->alpha * simd_load1(x->a, i, dt) + x->beta * simd_load1(x->b, i, dt), dt);
}

#define ADD_VECTOR(isa)                                                                              \
	SIMD_ISA_INLINE(isa) void add_##isa(const Add_Args *x, int64_t i, int64_t end, DataflowDatatype dt)   \
	{                                                                                            \
		Vf_##isa alpha = vset1_##isa(x->alpha), beta = vset1_##isa(x->beta);                   \
		for (; i + VL_##isa <= end; i += VL_##isa)                                           \
			vstore_##isa(x->out, i, alpha * vload_##isa(x->a, i, dt) + beta * vload_##isa(x->b, i, dt), \
				     dt);                                                            \
		add_scalar(x, i, end, dt); /* the tail */                                            \
	}
SIMD_EACH_ISA(ADD_VECTOR)

/* This part's range by `range` (a SIMD_DTYPE_KERNEL of add), straight into out, or for a large
 * output that does not partly overlap an input, chunk by chunk into an L1 buffer streamed out. */
static void add_part(void **args, int part, int num_parts, void (*range)(const Add_Args *, int64_t, int64_t),
		     int64_t size)
{
	int64_t i, end;
	Add_Args x = dataflow_add_args(args);
	dataflow_part_range(x.n, part, num_parts, PART_ALIGN, &i, &end);
	int level = simd_level();
	size_t bytes = (size_t)(x.n * size);
	int stream = x.n * size >= STREAM_MIN_BYTES && level != SIMD_SCALAR &&
		     (x.out == x.a || !stream_overlap(x.out, bytes, x.a, bytes)) &&
		     (x.out == x.b || !stream_overlap(x.out, bytes, x.b, bytes));
	if (!stream) {
		range(&x, i, end);
		return;
	}
	_Alignas(64) char buf[STREAM_CHUNK_BYTES];
	for (int64_t c = i, chunk = STREAM_CHUNK_BYTES / size; c < end; c += chunk) {
		int64_t len = end - c < chunk ? end - c : chunk;
		Add_Args y = x;
		y.a = (const char *)x.a + c * size;
		y.b = (const char *)x.b + c * size;
		y.out = buf;
		range(&y, 0, len);
		stream_copy((char *)x.out + c * size, buf, (size_t)(len * size), level);
	}
	stream_fence();
}

#define ADD_KERNEL(name, DT, T)                                                                      \
	SIMD_DTYPE_KERNEL(add_##name, add, Add_Args, DT)                                             \
	void dataflow_host_add_##name(void **args, int part, int num_parts)                          \
	{                                                                                            \
		add_part(args, part, num_parts, add_##name, sizeof(T));                              \
	}

ADD_KERNEL(fp32, DATAFLOW_FP32, float)
ADD_KERNEL(bf16, DATAFLOW_BF16, uint16_t)
ADD_KERNEL(fp16, DATAFLOW_FP16, uint16_t)

DATAFLOW_HOST_ELEMENTWISE_LAUNCH(dataflow_host_add_launch, Add_Args, dataflow_add_args,
				 PART_MIN_BYTES / (int64_t)dataflow_datatype_size(op->skeleton.arg_dtypes[DATAFLOW_ADD_ARG_OUT]))
