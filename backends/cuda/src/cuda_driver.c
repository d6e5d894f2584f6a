#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_driver.h"

/* One function table per process, filled once. A missing symbol means a driver older than
 * the API used here, reported with the symbol's name. */


static Cuda_Driver table;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static Dataflow_Status load_status;
static char load_message[768];

static const struct {
	const char *symbol;
	size_t offset;
} symbols[] = {
#define SYM(field, name) {name, offsetof(Cuda_Driver, field)}
	SYM(cuInit, "cuInit"),
	SYM(cuDeviceGetCount, "cuDeviceGetCount"),
	SYM(cuDeviceGet, "cuDeviceGet"),
	SYM(cuDeviceGetAttribute, "cuDeviceGetAttribute"),
	SYM(cuDeviceGetName, "cuDeviceGetName"),
	SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
	SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
	SYM(cuCtxSetCurrent, "cuCtxSetCurrent"),
	SYM(cuCtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange"),
	SYM(cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess"),
	SYM(cuCtxDisablePeerAccess, "cuCtxDisablePeerAccess"),
	SYM(cuStreamCreateWithPriority, "cuStreamCreateWithPriority"),
	SYM(cuStreamDestroy, "cuStreamDestroy_v2"),
	SYM(cuStreamSynchronize, "cuStreamSynchronize"),
	SYM(cuStreamWaitEvent, "cuStreamWaitEvent"),
	SYM(cuEventCreate, "cuEventCreate"),
	SYM(cuEventRecord, "cuEventRecord"),
	SYM(cuEventQuery, "cuEventQuery"),
	SYM(cuEventSynchronize, "cuEventSynchronize"),
	SYM(cuEventDestroy, "cuEventDestroy_v2"),
	SYM(cuMemGetInfo, "cuMemGetInfo_v2"),
	SYM(cuMemAlloc, "cuMemAlloc_v2"),
	SYM(cuMemFree, "cuMemFree_v2"),
	SYM(cuMemsetD8Async, "cuMemsetD8Async"),
	SYM(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
	SYM(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
	SYM(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
	SYM(cuMemcpyPeerAsync, "cuMemcpyPeerAsync"),
	SYM(cuMemHostRegister, "cuMemHostRegister_v2"),
	SYM(cuMemHostUnregister, "cuMemHostUnregister"),
	SYM(cuLaunchKernel, "cuLaunchKernel"),
	SYM(cuLaunchHostFunc, "cuLaunchHostFunc"),
	SYM(cuModuleLoadData, "cuModuleLoadData"),
	SYM(cuModuleGetFunction, "cuModuleGetFunction"),
	SYM(cuModuleUnload, "cuModuleUnload"),
	SYM(cuFuncSetAttribute, "cuFuncSetAttribute"),
	SYM(cuGetErrorName, "cuGetErrorName"),
	SYM(cuGetErrorString, "cuGetErrorString"),
#undef SYM
};

static void fail(Dataflow_Status st, const char *fmt, const char *a, const char *b)
{
	load_status = st;
	snprintf(load_message, sizeof(load_message), fmt, a, b);
}

static void load(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fail(DATAFLOW_ERR_LOAD_FAILED, "cuda backend: cannot load libcuda.so.1 (no NVIDIA driver?): %s%s", dlerror(),
		     "");
		return;
	}
	for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
		void *fn = dlsym(lib, symbols[i].symbol);
		if (!fn) {
			fail(DATAFLOW_ERR_LOAD_FAILED, "cuda backend: libcuda.so.1 lacks %s (driver too old?)%s",
			     symbols[i].symbol, "");
			dlclose(lib);
			return;
		}
		memcpy((char *)&table + symbols[i].offset, &fn, sizeof(fn));
	}
	CUresult r = table.cuInit(0);
	if (r != CUDA_SUCCESS) {
		const char *name = "unknown CUresult", *text = "";
		table.cuGetErrorName(r, &name);
		table.cuGetErrorString(r, &text);
		fail(DATAFLOW_ERR_BACKEND, "cuda backend: cuInit failed: %s (%s)", name, text);
		return;
	}
	load_status = DATAFLOW_OK;
}

Dataflow_Status cuda_driver_load(const Cuda_Driver **driver)
{
	pthread_once(&load_once, load);
	if (load_status != DATAFLOW_OK)
		return dataflow_set_error(load_status, "%s", load_message);
	*driver = &table;
	return DATAFLOW_OK;
}

const Cuda_Driver *cuda_driver(void)
{
	return &table;
}

Dataflow_Status cuda_check(CUresult r, int device_index, const char *what)
{
	if (r == CUDA_SUCCESS)
		return DATAFLOW_OK;
	const char *name = NULL, *text = NULL;
	if (table.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
		name = "unknown CUresult";
	if (table.cuGetErrorString(r, &text) != CUDA_SUCCESS || !text)
		text = "";
	return dataflow_set_error(r == CUDA_ERROR_OUT_OF_MEMORY ? DATAFLOW_ERR_OUT_OF_MEMORY : DATAFLOW_ERR_BACKEND,
				  "cuda:%d %s: %s (%d: %s)", device_index, what, name, r, text);
}
