#ifndef DATAFLOW_CUDA_DRIVER_H
#define DATAFLOW_CUDA_DRIVER_H

/* The CUDA Driver API, loaded at run time with dlopen("libcuda.so.1") so that the backend
 * builds without a CUDA toolkit and loads on machines without a driver. The few types and
 * constants used are declared here with the values of cuda.h (CUDA 12/13; they are part of
 * the driver's stable ABI). Functions are resolved by their versioned symbol names (the
 * _v2 names cuda.h maps the plain names to). */

#include <stddef.h>

#include "dataflow/status.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef void (*CUhostFn)(void *user_data);

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
	CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705,
	CUDA_ERROR_CONTAINED = 226, /* the errors that lose the context (cuda_fault.c) */
	CUDA_ERROR_ILLEGAL_ADDRESS = 700,
	CUDA_ERROR_LAUNCH_TIMEOUT = 702,
	CUDA_ERROR_ASSERT = 710,
	CUDA_ERROR_HARDWARE_STACK_ERROR = 714,
	CUDA_ERROR_ILLEGAL_INSTRUCTION = 715,
	CUDA_ERROR_MISALIGNED_ADDRESS = 716,
	CUDA_ERROR_INVALID_ADDRESS_SPACE = 717,
	CUDA_ERROR_INVALID_PC = 718,
	CUDA_ERROR_LAUNCH_FAILED = 719,
	CUDA_ERROR_TENSOR_MEMORY_LEAK = 721,
	CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
	CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
	CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
	CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
	CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
	CU_STREAM_NON_BLOCKING = 0x1,
	CU_EVENT_DISABLE_TIMING = 0x2,
};

typedef struct {
	CUresult (*cuInit)(unsigned int flags);
	CUresult (*cuDeviceGetCount)(int *count);
	CUresult (*cuDeviceGet)(CUdevice *device, int ordinal);
	CUresult (*cuDeviceGetAttribute)(int *value, int attribute, CUdevice device);
	CUresult (*cuDeviceGetName)(char *name, int len, CUdevice device);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice device);
	CUresult (*cuDevicePrimaryCtxRelease)(CUdevice device);
	CUresult (*cuCtxSetCurrent)(CUcontext ctx);
	CUresult (*cuCtxGetStreamPriorityRange)(int *least, int *greatest);
	CUresult (*cuCtxEnablePeerAccess)(CUcontext peer, unsigned int flags);
	CUresult (*cuCtxDisablePeerAccess)(CUcontext peer);
	CUresult (*cuStreamCreateWithPriority)(CUstream *stream, unsigned int flags, int priority);
	CUresult (*cuStreamDestroy)(CUstream stream);
	CUresult (*cuStreamSynchronize)(CUstream stream);
	CUresult (*cuStreamWaitEvent)(CUstream stream, CUevent event, unsigned int flags);
	CUresult (*cuEventCreate)(CUevent *event, unsigned int flags);
	CUresult (*cuEventRecord)(CUevent event, CUstream stream);
	CUresult (*cuEventQuery)(CUevent event); /* CUDA_SUCCESS when done, CUDA_ERROR_NOT_READY if not */
	CUresult (*cuEventSynchronize)(CUevent event);
	CUresult (*cuEventDestroy)(CUevent event);
	CUresult (*cuMemGetInfo)(size_t *free_bytes, size_t *total_bytes);
	CUresult (*cuMemAlloc)(CUdeviceptr *ptr, size_t size);
	CUresult (*cuMemFree)(CUdeviceptr ptr);
	CUresult (*cuMemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream);
	CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t n, CUstream stream);
	CUresult (*cuMemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t n, CUstream stream);
	CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream);
	CUresult (*cuMemcpyPeerAsync)(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
				      CUstream stream);
	CUresult (*cuMemHostRegister)(void *ptr, size_t size, unsigned int flags);
	CUresult (*cuMemHostUnregister)(void *ptr);
	CUresult (*cuLaunchKernel)(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
				   unsigned int by, unsigned int bz, unsigned int shared_bytes, CUstream stream,
				   void **params, void **extra);
	CUresult (*cuLaunchHostFunc)(CUstream stream, CUhostFn fn, void *user_data);
	CUresult (*cuModuleLoadData)(CUmodule *module, const void *image);
	CUresult (*cuModuleGetFunction)(CUfunction *fn, CUmodule module, const char *name);
	CUresult (*cuModuleUnload)(CUmodule module);
	CUresult (*cuFuncSetAttribute)(CUfunction fn, int attribute, int value);
	CUresult (*cuGetErrorName)(CUresult error, const char **name);
	CUresult (*cuGetErrorString)(CUresult error, const char **text);
} Cuda_Driver;

/* Loads libcuda.so.1 and calls cuInit once per process; later calls return the same outcome
 * (status and message). On success *driver points at the function table. */
Dataflow_Status cuda_driver_load(const Cuda_Driver **driver);
/* The loaded table (call after a successful cuda_driver_load). */
const Cuda_Driver *cuda_driver(void);
/* DATAFLOW_OK for CUDA_SUCCESS; otherwise sets an error "cuda:<device> <what>: <NAME> (<text>)"
 * and returns DATAFLOW_ERR_BACKEND (DATAFLOW_ERR_OUT_OF_MEMORY for CUDA_ERROR_OUT_OF_MEMORY). */
Dataflow_Status cuda_check(CUresult result, int device_index, const char *what);

#endif
