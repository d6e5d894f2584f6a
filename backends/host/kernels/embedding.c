/* embedding:       out[t, :] = table[ids[t], :]           (zero row when ids[t] is outside [0, vocab))
 * embedding_bwd_w: d_table[ids[t], :] += d_out[t, :]      (out-of-range ids skipped)
 * The forward is a row copy (memcpy is already vectorized); parts own token ranges.
 * The backward must not race on repeated ids and must not depend on the thread count, so
 * parts own column ranges of d_table and each walks every token in order: each element's
 * sum is taken in token order, in fp32, one add per token, on every SIMD path. */
#include <string.h>

#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "simd_dtype.h"

/* forward parts copy at least 32 KiB. Backward column ranges are whole 64-byte lines of
 * d_table and at least 256 columns: a part visits every token's row, so narrow ranges would
 * turn each visit into an isolated cache miss the prefetcher cannot help. */
#define FWD_MIN_BYTES 32768
#define BWD_COLS_ALIGN 16
#define BWD_MIN_COLS 256
#define BWD_MIN_ELEMENTS 16384

typedef Dataflow_Embedding_Bwd_W_Args Bwd_Args;

SIMD_INLINE int64_t embedding_id(const void *ids, int64_t t, DataflowDatatype id_dt)
{
	return id_dt == DATAFLOW_INT64 ? ((const int64_t *)ids)[t] : ((const int32_t *)ids)[t];
}

/* ---- forward ---- */

SIMD_INLINE void embedding_fwd(void **args, int part, int num_parts, DataflowDatatype id_dt, size_t size)
{
	Dataflow_Embedding_Args x = dataflow_embedding_args(args);
	int64_t t, end;
	dataflow_part_range(x.num_tokens, part, num_parts, 1, &t, &end);
	size_t row = (size_t)x.hidden * size;
	for (; t < end; t++) {
		int64_t id = embedding_id(x.ids, t, id_dt);
		char *dst = (char *)x.out + (size_t)t * row;
		if (id >= 0 && id < x.vocab)
			memcpy(dst, (const char *)x.table + (size_t)id * row, row);
		else
			memset(dst, 0, row);
	}
}

#define EMBEDDING_FWD(dt, id, id_dt, size)                                                \
	void dataflow_host_embedding_##dt##_##id(void **args, int part, int num_parts) \
	{                                                                                  \
		embedding_fwd(args, part, num_parts, id_dt, size);                         \
	}
EMBEDDING_FWD(fp32, int32, DATAFLOW_INT32, 4)
EMBEDDING_FWD(fp32, int64, DATAFLOW_INT64, 4)
EMBEDDING_FWD(bf16, int32, DATAFLOW_INT32, 2)
EMBEDDING_FWD(bf16, int64, DATAFLOW_INT64, 2)
EMBEDDING_FWD(fp16, int32, DATAFLOW_INT32, 2)
EMBEDDING_FWD(fp16, int64, DATAFLOW_INT64, 2)

/* parts of at least FWD_MIN_BYTES of output, whole tokens */
static int fwd_parts(const Op *op, Dataflow_Embedding_Args a)
{
	int64_t row_bytes = a.hidden * (int64_t)dataflow_datatype_size(op->skeleton.arg_dtypes[DATAFLOW_EMBEDDING_ARG_OUT]);
	return dataflow_parts_at_most(dataflow_elementwise_parts(a.num_tokens * row_bytes, FWD_MIN_BYTES), a.num_tokens);
}

DATAFLOW_HOST_LAUNCH(dataflow_host_embedding_launch, Dataflow_Embedding_Args, dataflow_embedding_args, fwd_parts(op, a))

/* ---- backward ---- */

/* acc[c:end] += src[src_off + c : src_off + end], whole vectors; returns where it stopped */
#define ACCUMULATE_VECTOR(isa)                                                                       \
	SIMD_ISA_INLINE(isa) int64_t accumulate_##isa(float *acc, const void *src, int64_t src_off, int64_t c, \
						      int64_t end, DataflowDatatype dt)                      \
	{                                                                                            \
		for (; c + VL_##isa <= end; c += VL_##isa)                                           \
			vstoref_##isa(acc + c, vloadf_##isa(acc + c) + vload_##isa(src, src_off + c, dt)); \
		return c;                                                                            \
	}
SIMD_EACH_ISA(ACCUMULATE_VECTOR)

SIMD_INLINE int64_t accumulate_scalar(float *acc, const void *src, int64_t src_off, int64_t c, int64_t end,
				      DataflowDatatype dt)
{
	(void)acc, (void)src, (void)src_off, (void)end, (void)dt;
	return c; /* the callers' tail loop does it all */
}

/* embedding_bwd_<isa>: columns [c0, c1) of d_table += d_out rows, token by token */
#define EMBEDDING_BWD_PATH(isa)                                                                             \
	SIMD_TARGET_##isa static void embedding_bwd_##isa(Bwd_Args x, int64_t c0, int64_t c1, DataflowDatatype id_dt, \
							  DataflowDatatype dt)                               \
	{                                                                                                   \
		for (int64_t t = 0; t < x.num_tokens; t++) {                                                \
			int64_t id = embedding_id(x.ids, t, id_dt);                                         \
			if (id < 0 || id >= x.vocab)                                                        \
				continue;                                                                   \
			float *acc = (float *)x.d_table + id * x.hidden;                                    \
			int64_t c = accumulate_##isa(acc, x.d_out, t * x.hidden, c0, c1, dt);               \
			for (; c < c1; c++)                                                                 \
				acc[c] += simd_load1(x.d_out, t * x.hidden + c, dt);                        \
		}                                                                                           \
	}
SIMD_EACH_ISA(EMBEDDING_BWD_PATH)
EMBEDDING_BWD_PATH(scalar)

SIMD_INLINE void embedding_bwd(void **args, int part, int num_parts, DataflowDatatype id_dt, DataflowDatatype dt)
{
	Bwd_Args x = dataflow_embedding_bwd_w_args(args);
	int64_t c0, c1;
	dataflow_part_range(x.hidden, part, num_parts, BWD_COLS_ALIGN, &c0, &c1);
	if (c0 == c1)
		return;
	SIMD_DISPATCH(embedding_bwd, x, c0, c1, id_dt, dt);
}

#define EMBEDDING_BWD(dt, id, dt_enum, id_dt)                                                     \
	void dataflow_host_embedding_bwd_w_##dt##_##id##_fp32(void **args, int part, int num_parts) \
	{                                                                                          \
		embedding_bwd(args, part, num_parts, id_dt, dt_enum);                              \
	}
EMBEDDING_BWD(fp32, int32, DATAFLOW_FP32, DATAFLOW_INT32)
EMBEDDING_BWD(fp32, int64, DATAFLOW_FP32, DATAFLOW_INT64)
EMBEDDING_BWD(bf16, int32, DATAFLOW_BF16, DATAFLOW_INT32)
EMBEDDING_BWD(bf16, int64, DATAFLOW_BF16, DATAFLOW_INT64)
EMBEDDING_BWD(fp16, int32, DATAFLOW_FP16, DATAFLOW_INT32)
EMBEDDING_BWD(fp16, int64, DATAFLOW_FP16, DATAFLOW_INT64)

/* parts are column ranges of at least BWD_MIN_COLS */
DATAFLOW_HOST_LAUNCH(dataflow_host_embedding_bwd_w_launch, Bwd_Args, dataflow_embedding_bwd_w_args,
		     dataflow_parts_at_most(dataflow_elementwise_parts(a.num_tokens * a.hidden, BWD_MIN_ELEMENTS),
					    (a.hidden + BWD_MIN_COLS - 1) / BWD_MIN_COLS))
