/* cast: dst = convert(src) over n elements, RNE (dataflow_convert, bit-exact with
 * ml_dtypes), one kernel per (src, dst) pair. Outputs of at least STREAM_MIN_BYTES that do
 * not overlap the input are converted chunk by chunk into an L1 buffer and written with
 * streaming stores. */
#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "stream_store.h"

/* parts are multiples of 64 elements and at least 32 KiB of output */
#define PART_ALIGN 64
#define PART_MIN_BYTES 32768

static void cast_part(DataflowDatatype src_dtype, DataflowDatatype dst_dtype, void **args, int part, int num_parts)
{
	Dataflow_Cast_Args a = dataflow_cast_args(args);
	int64_t n = a.n;
	const char *src = a.src;
	char *dst = a.dst;
	int64_t begin, end;
	dataflow_part_range(n, part, num_parts, PART_ALIGN, &begin, &end);
	int64_t src_size = (int64_t)dataflow_datatype_size(src_dtype), dst_size = (int64_t)dataflow_datatype_size(dst_dtype);
	int level = simd_level();
	if (n * dst_size < STREAM_MIN_BYTES || level == SIMD_SCALAR ||
	    stream_overlap(dst, (size_t)(n * dst_size), src, (size_t)(n * src_size))) {
		/* dtypes and pointers were checked at submission, so this cannot fail */
		(void)dataflow_convert(dst_dtype, dst + begin * dst_size, src_dtype, src + begin * src_size,
				       (size_t)(end - begin));
		return;
	}
	_Alignas(64) char buf[STREAM_CHUNK_BYTES];
	for (int64_t c = begin, chunk = STREAM_CHUNK_BYTES / dst_size; c < end; c += chunk) {
		int64_t len = end - c < chunk ? end - c : chunk;
		(void)dataflow_convert(dst_dtype, buf, src_dtype, src + c * src_size, (size_t)len);
		stream_copy(dst + c * dst_size, buf, (size_t)(len * dst_size), level);
	}
	stream_fence();
}

#define CAST(S, S_DTYPE, D, D_DTYPE)                                                  \
	void dataflow_host_cast_##S##_to_##D(void **args, int part, int num_parts)     \
	{                                                                             \
		cast_part(S_DTYPE, D_DTYPE, args, part, num_parts);                   \
	}

CAST(fp32, DATAFLOW_FP32, fp16, DATAFLOW_FP16)
CAST(fp32, DATAFLOW_FP32, bf16, DATAFLOW_BF16)
CAST(fp32, DATAFLOW_FP32, fp8e4m3, DATAFLOW_FP8E4M3)
CAST(fp32, DATAFLOW_FP32, fp8e5m2, DATAFLOW_FP8E5M2)
CAST(fp16, DATAFLOW_FP16, fp32, DATAFLOW_FP32)
CAST(fp16, DATAFLOW_FP16, bf16, DATAFLOW_BF16)
CAST(fp16, DATAFLOW_FP16, fp8e4m3, DATAFLOW_FP8E4M3)
CAST(fp16, DATAFLOW_FP16, fp8e5m2, DATAFLOW_FP8E5M2)
CAST(bf16, DATAFLOW_BF16, fp32, DATAFLOW_FP32)
CAST(bf16, DATAFLOW_BF16, fp16, DATAFLOW_FP16)
CAST(bf16, DATAFLOW_BF16, fp8e4m3, DATAFLOW_FP8E4M3)
CAST(bf16, DATAFLOW_BF16, fp8e5m2, DATAFLOW_FP8E5M2)
CAST(fp8e4m3, DATAFLOW_FP8E4M3, fp32, DATAFLOW_FP32)
CAST(fp8e4m3, DATAFLOW_FP8E4M3, fp16, DATAFLOW_FP16)
CAST(fp8e4m3, DATAFLOW_FP8E4M3, bf16, DATAFLOW_BF16)
CAST(fp8e4m3, DATAFLOW_FP8E4M3, fp8e5m2, DATAFLOW_FP8E5M2)
CAST(fp8e5m2, DATAFLOW_FP8E5M2, fp32, DATAFLOW_FP32)
CAST(fp8e5m2, DATAFLOW_FP8E5M2, fp16, DATAFLOW_FP16)
CAST(fp8e5m2, DATAFLOW_FP8E5M2, bf16, DATAFLOW_BF16)
CAST(fp8e5m2, DATAFLOW_FP8E5M2, fp8e4m3, DATAFLOW_FP8E4M3)

DATAFLOW_HOST_ELEMENTWISE_LAUNCH(dataflow_host_cast_launch, Dataflow_Cast_Args, dataflow_cast_args,
				 PART_MIN_BYTES / (int64_t)dataflow_datatype_size(op->skeleton.arg_dtypes[DATAFLOW_CAST_ARG_DST]))
