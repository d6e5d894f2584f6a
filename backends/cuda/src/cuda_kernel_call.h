#ifndef DATAFLOW_CUDA_KERNEL_CALL_H
#define DATAFLOW_CUDA_KERNEL_CALL_H

/* Kernels of the embedded sources that an external op (attention, embedding_bwd_w) launches
 * itself, several per submission and with parameter lists of its own. A Cuda_Kernel names
 * its file and symbol; the module is shared with the native ops of the same file (one NVRTC
 * compile per handle and file, cached on disk) and the function is resolved at first use. */

#include "cuda_backend.h"

typedef struct {
	const char *file;  /* kernels/<file> */
	const char *name;  /* its extern "C" __global__ symbol */
	Cuda_Op op;        /* module and function, once resolved */
	int smem_limit;    /* dynamic shared memory the function may use (raised past 48 KiB on demand) */
	pthread_mutex_t lock;
} Cuda_Kernel;

void cuda_kernel_init(Cuda_Kernel *k, const char *file, const char *name);
void cuda_kernel_destroy(Cuda_Kernel *k);
/* Launches k on the stream with grid (gx, gy), block threads and smem bytes of dynamic shared
 * memory; args as cuLaunchKernel's kernelParams. A zero grid launches nothing. */
Dataflow_Status cuda_kernel_launch(Cuda_Handle *h, int stream_id, Cuda_Kernel *k, uint32_t gx, uint32_t gy,
				   uint32_t block, uint32_t smem, void **args);
/* The device's multiprocessor count and opt-in shared memory per block. */
Dataflow_Status cuda_device_limits(Cuda_Handle *h, int *sm_count, int *max_smem);

#endif
