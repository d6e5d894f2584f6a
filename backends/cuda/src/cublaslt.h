#ifndef DATAFLOW_CUBLASLT_H
#define DATAFLOW_CUBLASLT_H

/* The few cuBLASLt types and constants the matmul uses, declared here so the backend builds
 * without CUDA headers. Values from cublasLt.h / library_types.h / cublas_api.h of
 * cuBLAS 12.x and 13.0 (cuBLASLt API version 12.0+; unchanged since 11.0 for these). */

#include <stddef.h>
#include <stdint.h>

typedef int cublasStatus_t; /* CUBLAS_STATUS_SUCCESS = 0 */
typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque_st *cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque_st *cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque_st *cublasLtMatmulPreference_t;

typedef struct {
	uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
	cublasLtMatmulAlgo_t algo;
	size_t workspaceSize;
	cublasStatus_t state;
	float wavesCount;
	int reserved[4];
} cublasLtMatmulHeuristicResult_t;

enum {
	CUDA_R_32F = 0, /* cudaDataType_t */
	CUDA_R_16F = 2,
	CUDA_R_16BF = 14,
	CUBLAS_COMPUTE_32F = 68, /* cublasComputeType_t */
	CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
	CUBLAS_OP_N = 0, /* cublasOperation_t */
	CUBLAS_OP_T = 1,
	CUBLASLT_MATMUL_DESC_TRANSA = 3, /* cublasLtMatmulDescAttributes_t */
	CUBLASLT_MATMUL_DESC_TRANSB = 4,
	CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, /* cublasLtMatmulPreferenceAttributes_t */
	CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
	CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2, /* cublasLtReductionScheme_t */
	CUBLASLT_REDUCTION_SCHEME_MASK = 7,
};

typedef struct {
	size_t (*cublasLtGetVersion)(void);
	const char *(*cublasLtGetStatusName)(cublasStatus_t status);
	cublasStatus_t (*cublasLtCreate)(cublasLtHandle_t *handle);
	cublasStatus_t (*cublasLtDestroy)(cublasLtHandle_t handle);
	cublasStatus_t (*cublasLtMatmulDescCreate)(cublasLtMatmulDesc_t *desc, int compute_type, int scale_type);
	cublasStatus_t (*cublasLtMatmulDescSetAttribute)(cublasLtMatmulDesc_t desc, int attr, const void *buf,
							 size_t size);
	cublasStatus_t (*cublasLtMatmulDescDestroy)(cublasLtMatmulDesc_t desc);
	cublasStatus_t (*cublasLtMatrixLayoutCreate)(cublasLtMatrixLayout_t *layout, int type, uint64_t rows,
						     uint64_t cols, int64_t ld);
	cublasStatus_t (*cublasLtMatrixLayoutDestroy)(cublasLtMatrixLayout_t layout);
	cublasStatus_t (*cublasLtMatmulPreferenceCreate)(cublasLtMatmulPreference_t *pref);
	cublasStatus_t (*cublasLtMatmulPreferenceSetAttribute)(cublasLtMatmulPreference_t pref, int attr,
							       const void *buf, size_t size);
	cublasStatus_t (*cublasLtMatmulPreferenceDestroy)(cublasLtMatmulPreference_t pref);
	cublasStatus_t (*cublasLtMatmulAlgoGetHeuristic)(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
							 cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
							 cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
							 cublasLtMatmulPreference_t pref, int requested,
							 cublasLtMatmulHeuristicResult_t *results, int *returned);
	cublasStatus_t (*cublasLtMatmul)(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha,
					 const void *A, cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b,
					 const void *beta, const void *C, cublasLtMatrixLayout_t c, void *D,
					 cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t *algo, void *workspace,
					 size_t workspace_size, void *stream);
} Cublaslt;

#endif
