#ifndef DATAFLOW_DATATYPE_H
#define DATAFLOW_DATATYPE_H

#include <stddef.h>
#include <stdint.h>

#include "dataflow/status.h"

/* Datatypes of op arguments. A tensor datatype means the argument value is a device
 * pointer (void *) to elements of that type; a *_SCALAR datatype means the argument value
 * is one C value of that type, passed by value.
 * The numeric values are part of the fingerprint encoding: never renumber, only append. */
typedef enum {
	DATAFLOW_NONE = 0,
	DATAFLOW_FP32 = 1,
	DATAFLOW_FP16 = 2,
	DATAFLOW_BF16 = 3,
	DATAFLOW_FP8E4M3 = 4,
	DATAFLOW_FP8E5M2 = 5,
	DATAFLOW_INT8 = 6,
	DATAFLOW_INT16 = 7,
	DATAFLOW_INT32 = 8,
	DATAFLOW_INT64 = 9,
	DATAFLOW_UINT8 = 10,
	DATAFLOW_UINT16 = 11,
	DATAFLOW_UINT32 = 12,
	DATAFLOW_UINT64 = 13,
	DATAFLOW_BOOL = 14,
	DATAFLOW_FP64 = 15,
	/* scalars passed by value */
	DATAFLOW_FP32_SCALAR = 64,
	DATAFLOW_FP64_SCALAR = 65,
	DATAFLOW_INT32_SCALAR = 66,
	DATAFLOW_INT64_SCALAR = 67,
	DATAFLOW_UINT64_SCALAR = 68,
	DATAFLOW_BOOL_SCALAR = 69 /* passed as int32 0/1 */
} DataflowDatatype;

/* Bytes per element for tensor datatypes, bytes of the value for scalars, 0 if invalid. */
size_t dataflow_datatype_size(DataflowDatatype dtype);
/* "fp32", "bf16", ..., "int64_scalar"; NULL if invalid. */
const char *dataflow_datatype_name(DataflowDatatype dtype);
/* Inverse of dataflow_datatype_name; DATAFLOW_NONE if the name is unknown. */
DataflowDatatype dataflow_datatype_from_name(const char *name);
int dataflow_datatype_is_scalar(DataflowDatatype dtype);
int dataflow_datatype_is_tensor(DataflowDatatype dtype);

/* Round-to-nearest-even conversions with subnormals, bit-exact with ml_dtypes (bfloat16,
 * float8_e4m3fn, float8_e5m2) and numpy (float16). Overflow gives Inf, except for fp8 e4m3,
 * which has no Inf: values rounding past 448, and +-Inf, give NaN with the input's sign.
 * NaN stays NaN with its sign; bf16 and fp8 produce the canonical quiet NaN, fp16 keeps the
 * top payload bits as numpy does. Widening is exact. */
uint16_t dataflow_fp32_to_bf16(float x);
float dataflow_bf16_to_fp32(uint16_t x);
uint16_t dataflow_fp32_to_fp16(float x);
float dataflow_fp16_to_fp32(uint16_t x);
uint8_t dataflow_fp32_to_fp8e4m3(float x);
float dataflow_fp8e4m3_to_fp32(uint8_t x);
uint8_t dataflow_fp32_to_fp8e5m2(float x);
float dataflow_fp8e5m2_to_fp32(uint8_t x);

/* Vector path of the conversions and host kernels: 0 scalar, 1 AVX2, 2 AVX-512; the best
 * this CPU runs, capped by DATAFLOW_SIMD=scalar|avx2|avx512 so tests can run every path. */
int dataflow_simd_level(void);

/* Converts n elements between any two floating tensor datatypes (fp32, fp16, bf16,
 * fp8e4m3, fp8e5m2), vectorized where the CPU allows (runtime dispatch; the environment
 * variable DATAFLOW_SIMD=scalar|avx2|avx512 caps the path, every path gives the same bits).
 * Host memory; dst and src must not overlap unless the dtypes are equal. */
Dataflow_Status dataflow_convert(DataflowDatatype dst_dtype, void *dst, DataflowDatatype src_dtype,
				 const void *src, size_t n);

#endif
