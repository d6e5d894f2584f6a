#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernel_call.h"

void cuda_kernel_init(Cuda_Kernel *k, const char *file, const char *name)
{
	memset(k, 0, sizeof(*k));
	k->file = file;
	k->name = name;
	snprintf(k->op.kernel_name, sizeof(k->op.kernel_name), "%s", name);
	pthread_mutex_init(&k->lock, NULL);
}

void cuda_kernel_destroy(Cuda_Kernel *k)
{
	pthread_mutex_destroy(&k->lock); /* the module belongs to the handle */
}

static Dataflow_Status resolve(Cuda_Handle *h, Cuda_Kernel *k)
{
	if (!k->op.module) {
		const Cuda_Source *src = cuda_find_source(k->file);
		if (!src)
			return dataflow_set_error(DATAFLOW_ERR_INTERNAL, "cuda: no embedded kernel source %s", k->file);
		char *text = strdup(src->text);
		if (!text)
			return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "cuda: no memory for %s", k->file);
		pthread_mutex_lock(&h->lock);
		k->op.module = cuda_module_for(h, src->name, text, NULL);
		pthread_mutex_unlock(&h->lock);
		if (!k->op.module)
			return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "cuda: no memory for a module");
	}
	return cuda_op_function(h, &k->op);
}

Dataflow_Status cuda_kernel_launch(Cuda_Handle *h, int stream_id, Cuda_Kernel *k, uint32_t gx, uint32_t gy,
				   uint32_t block, uint32_t smem, void **args)
{
	if (gx == 0 || gy == 0)
		return DATAFLOW_OK;
	pthread_mutex_lock(&k->lock);
	Dataflow_Status st = resolve(h, k);
	if (st == DATAFLOW_OK && smem > 48 * 1024 && (int)smem > k->smem_limit) {
		char what[200];
		snprintf(what, sizeof(what), "cuFuncSetAttribute(%s, max dynamic shared memory %u)", k->name, smem);
		st = cuda_check(h->cu->cuFuncSetAttribute(k->op.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
							  (int)smem),
				h->handle->device_index, what);
		if (st == DATAFLOW_OK)
			k->smem_limit = (int)smem;
	}
	pthread_mutex_unlock(&k->lock);
	if (st != DATAFLOW_OK)
		return st;
	char what[200];
	snprintf(what, sizeof(what), "cuLaunchKernel(%s)", k->name);
	return cuda_check_fault(h, h->cu->cuLaunchKernel(k->op.function, gx, gy, 1, block, 1, 1, smem,
							 h->streams[stream_id].stream, args, NULL),
				what);
}

Dataflow_Status cuda_device_limits(Cuda_Handle *h, int *sm_count, int *max_smem)
{
	Dataflow_Status st = cuda_check(h->cu->cuDeviceGetAttribute(sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
								    h->device),
					h->handle->device_index, "cuDeviceGetAttribute(multiprocessors)");
	if (st == DATAFLOW_OK)
		st = cuda_check(h->cu->cuDeviceGetAttribute(max_smem, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
							    h->device),
				h->handle->device_index, "cuDeviceGetAttribute(shared memory per block)");
	return st;
}
