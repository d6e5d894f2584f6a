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

Dataflow_Status dataflow_host_embedding_launch(Dataflow_Handle *handle, const Op *op, void *op_state,
					       Dataflow_Launch_Config *config)
{
	(void)handle;
	(void)op_state;
	Dataflow_Embedding_Args x = dataflow_embedding_args(op->op_args);
	int64_t num_tokens = x.num_tokens;
	int64_t bytes = num_tokens * x.hidden * (int64_t)dataflow_datatype_size(op->skeleton.arg_dtypes[DATAFLOW_EMBEDDING_ARG_OUT]);
	int parts = dataflow_elementwise_parts(bytes, FWD_MIN_BYTES);
	config->num_parts = parts < num_tokens ? parts : (int)num_tokens;
	return DATAFLOW_OK;
}

/* ---- backward ---- */

/* acc[c:end] += src[src_off + c : src_off + end], whole vectors; returns where it stopped */
SIMD_TARGET_AVX512 SIMD_INLINE int64_t accumulate_avx512(float *acc, const void *src, int64_t src_off, int64_t c,
							int64_t end, DataflowDatatype dt)
{
	for (; c + 16 <= end; c += 16)
		_mm512_storeu_ps(acc + c, _mm512_add_ps(_mm512_loadu_ps(acc + c), simd_load16_avx512(src, src_off + c, dt)));
	return c;
}

SIMD_TARGET_AVX2 SIMD_INLINE int64_t accumulate_avx2(float *acc, const void *src, int64_t src_off, int64_t c,
						    int64_t end, DataflowDatatype dt)
{
	for (; c + 8 <= end; c += 8)
		_mm256_storeu_ps(acc + c, _mm256_add_ps(_mm256_loadu_ps(acc + c), simd_load8_avx2(src, src_off + c, dt)));
	return c;
}

SIMD_TARGET_AVX512 static void embedding_bwd_avx512(Bwd_Args x, int64_t c0, int64_t c1, DataflowDatatype id_dt,
						  DataflowDatatype dt)
{
	for (int64_t t = 0; t < x.num_tokens; t++) {
		int64_t id = embedding_id(x.ids, t, id_dt);
		if (id < 0 || id >= x.vocab)
			continue;
		float *acc = (float *)x.d_table + id * x.hidden;
		int64_t c = accumulate_avx512(acc, x.d_out, t * x.hidden, c0, c1, dt);
		for (; c < c1; c++)
			acc[c] += simd_load1(x.d_out, t * x.hidden + c, dt);
	}
}

SIMD_TARGET_AVX2 static void embedding_bwd_avx2(Bwd_Args x, int64_t c0, int64_t c1, DataflowDatatype id_dt,
					      DataflowDatatype dt)
{
	for (int64_t t = 0; t < x.num_tokens; t++) {
		int64_t id = embedding_id(x.ids, t, id_dt);
		if (id < 0 || id >= x.vocab)
			continue;
		float *acc = (float *)x.d_table + id * x.hidden;
		int64_t c = accumulate_avx2(acc, x.d_out, t * x.hidden, c0, c1, dt);
		for (; c < c1; c++)
			acc[c] += simd_load1(x.d_out, t * x.hidden + c, dt);
	}
}

static void embedding_bwd_scalar(Bwd_Args x, int64_t c0, int64_t c1, DataflowDatatype id_dt, DataflowDatatype dt)
{
	for (int64_t t = 0; t < x.num_tokens; t++) {
		int64_t id = embedding_id(x.ids, t, id_dt);
		if (id < 0 || id >= x.vocab)
			continue;
		float *acc = (float *)x.d_table + id * x.hidden;
		for (int64_t c = c0; c < c1; c++)
			acc[c] += simd_load1(x.d_out, t * x.hidden + c, dt);
	}
}

SIMD_INLINE void embedding_bwd(void **args, int part, int num_parts, DataflowDatatype id_dt, DataflowDatatype dt)
{
	Bwd_Args x = dataflow_embedding_bwd_w_args(args);
	int64_t c0, c1;
	dataflow_part_range(x.hidden, part, num_parts, BWD_COLS_ALIGN, &c0, &c1);
	if (c0 == c1)
		return;
	int level = simd_level();
	if (level == SIMD_AVX512)
		embedding_bwd_avx512(x, c0, c1, id_dt, dt);
	else if (level == SIMD_AVX2)
		embedding_bwd_avx2(x, c0, c1, id_dt, dt);
	else
		embedding_bwd_scalar(x, c0, c1, id_dt, dt);
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

Dataflow_Status dataflow_host_embedding_bwd_w_launch(Dataflow_Handle *handle, const Op *op, void *op_state,
						     Dataflow_Launch_Config *config)
{
	(void)handle;
	(void)op_state;
	Bwd_Args x = dataflow_embedding_bwd_w_args(op->op_args);
	int64_t hidden = x.hidden;
	int parts = dataflow_elementwise_parts(x.num_tokens * hidden, BWD_MIN_ELEMENTS);
	int64_t ranges = (hidden + BWD_MIN_COLS - 1) / BWD_MIN_COLS;
	config->num_parts = parts < ranges ? parts : (int)ranges;
	return DATAFLOW_OK;
}
