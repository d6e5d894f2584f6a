#ifndef DATAFLOW_CUDNN_API_H
#define DATAFLOW_CUDNN_API_H

/* The part of cuDNN's backend (graph) API that the SDPA external path uses, declared here so
 * the backend builds without cuDNN headers; cuDNN itself is loaded with dlopen (the
 * nvidia-cudnn-cu13 wheel, or the system). Values are those of cudnn_graph.h (cuDNN 9);
 * tests/hal/test_cuda_headers.py checks every one against the real header. */

#include <stddef.h>
#include <stdint.h>

typedef int cudnnStatus_t;
typedef struct cudnnContext *cudnnHandle_t;
typedef void *cudnnBackendDescriptor_t;

enum {
	CUDNN_STATUS_SUCCESS = 0,
	/* the families are the thousands: 1xxx, 2xxx bad parameter, 3xxx not supported, 4xxx internal */
	CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH = 1002,
	CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED = 1008,
	CUDNN_STATUS_BAD_PARAM = 2000,
	CUDNN_STATUS_NOT_SUPPORTED = 3000,
	CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED = 4001,
	/* cudnnBackendDescriptorType_t */
	CUDNN_BACKEND_ENGINECFG_DESCRIPTOR = 3,
	CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR = 4,
	CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR = 5,
	CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR = 15,
	CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR = 16,
	CUDNN_BACKEND_TENSOR_DESCRIPTOR = 17,
	CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR = 41,
	CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR = 43,
	CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR = 44,
	/* cudnnBackendAttributeType_t */
	CUDNN_TYPE_HANDLE = 0,
	CUDNN_TYPE_DATA_TYPE = 1,
	CUDNN_TYPE_BOOLEAN = 2,
	CUDNN_TYPE_INT64 = 3,
	CUDNN_TYPE_VOID_PTR = 6,
	CUDNN_TYPE_HEUR_MODE = 8,
	CUDNN_TYPE_POINTWISE_MODE = 14,
	CUDNN_TYPE_BACKEND_DESCRIPTOR = 15,
	/* cudnnDataType_t */
	CUDNN_DATA_FLOAT = 0,
	CUDNN_DATA_HALF = 2,
	CUDNN_DATA_INT32 = 4,
	CUDNN_DATA_BFLOAT16 = 9,
	/* cudnnBackendHeurMode_t */
	CUDNN_HEUR_MODE_FALLBACK = 2,
	CUDNN_HEUR_MODE_A = 3,
	/* cudnnPointwiseMode_t */
	CUDNN_POINTWISE_CMP_GE = 303,
	/* cudnnBackendAttributeName_t */
	CUDNN_ATTR_ENGINEHEUR_MODE = 200,
	CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH = 201,
	CUDNN_ATTR_ENGINEHEUR_RESULTS = 202,
	CUDNN_ATTR_EXECUTION_PLAN_HANDLE = 400,
	CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG = 401,
	CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE = 402,
	CUDNN_ATTR_OPERATIONGRAPH_HANDLE = 800,
	CUDNN_ATTR_OPERATIONGRAPH_OPS = 801,
	CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT = 900,
	CUDNN_ATTR_TENSOR_DATA_TYPE = 901,
	CUDNN_ATTR_TENSOR_DIMENSIONS = 902,
	CUDNN_ATTR_TENSOR_STRIDES = 903,
	CUDNN_ATTR_TENSOR_UNIQUE_ID = 906,
	CUDNN_ATTR_TENSOR_IS_VIRTUAL = 907,
	CUDNN_ATTR_TENSOR_IS_BY_VALUE = 908,
	CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS = 1000,
	CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS = 1001,
	CUDNN_ATTR_VARIANT_PACK_WORKSPACE = 1003,
	CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC = 2800,
	CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC = 2801,
	CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC = 2802,
	CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC = 2803,
	CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC = 2804,
	CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC = 2805,
	CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH = 2811,
	CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH_INPUT_UID = 2812,
	CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH_OUTPUT_UID = 2813,
	CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC = 2851,
	CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC = 2852,
	CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC = 2853,
	CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC = 2854,
	CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC = 2855,
	CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC = 2856,
	CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC = 2859,
	CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC = 2860,
	CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC = 2861,
	CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC = 2862,
	CUDNN_ATTR_OPERATION_SDPA_BWD_SUBGRAPH = 2867,
	CUDNN_ATTR_OPERATION_SDPA_BWD_SUBGRAPH_INPUT_UID = 2868,
	CUDNN_ATTR_OPERATION_SDPA_BWD_SUBGRAPH_OUTPUT_UID = 2869,
	CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_XDESC = 3000,
	CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_SHIFT_RIGHT_BOUND_DESC = 3004,
	CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_BDESC = 3005,
	CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_YDESC = 3006,
	CUDNN_ATTR_OPERATION_DIAGONAL_BAND_MASK_COMPARISON_MODE = 3007,
};

/* The functions, in this order (cuda_cudnn_sdpa.c resolves them by name). */
typedef struct {
	size_t (*cudnnGetVersion)(void);
	const char *(*cudnnGetErrorString)(cudnnStatus_t status);
	void (*cudnnGetLastErrorString)(char *message, size_t max_size);
	cudnnStatus_t (*cudnnCreate)(cudnnHandle_t *handle);
	cudnnStatus_t (*cudnnDestroy)(cudnnHandle_t handle);
	cudnnStatus_t (*cudnnSetStream)(cudnnHandle_t handle, void *stream);
	cudnnStatus_t (*cudnnBackendCreateDescriptor)(int type, cudnnBackendDescriptor_t *desc);
	cudnnStatus_t (*cudnnBackendDestroyDescriptor)(cudnnBackendDescriptor_t desc);
	cudnnStatus_t (*cudnnBackendFinalize)(cudnnBackendDescriptor_t desc);
	cudnnStatus_t (*cudnnBackendSetAttribute)(cudnnBackendDescriptor_t desc, int name, int type, int64_t count,
						  const void *values);
	cudnnStatus_t (*cudnnBackendGetAttribute)(cudnnBackendDescriptor_t desc, int name, int type, int64_t requested,
						  int64_t *count, void *values);
	cudnnStatus_t (*cudnnBackendExecute)(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
					     cudnnBackendDescriptor_t variant_pack);
} Cudnn_Api;

#endif
