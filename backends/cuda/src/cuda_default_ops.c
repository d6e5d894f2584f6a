#include <stdio.h>
#include <string.h>

#include "cuda_backend.h"
#include "dataflow/op_args.h"

/* The default native ops of the CUDA backend: their CUDA C++ sources (backends/cuda/kernels,
 * embedded at build time) and their launch functions, found by register_default_ops in
 * this library (dataflow_handle_default_ops_library). */

#define BLOCK 256
#define MAX_GRID 65535 /* kernels loop over the rest (grid-stride) */

const Cuda_Source *cuda_find_source(const char *name)
{
	for (int i = 0; i < cuda_num_kernel_sources; i++)
		if (!strcmp(cuda_kernel_sources[i].name, name))
			return &cuda_kernel_sources[i];
	return NULL;
}

/* The source of op `nickname` is kernels/<nickname>.cu. */
int dataflow_cuda_kernel_source(const char *op_nickname, const char **name, const char **text)
{
	char file[96];
	snprintf(file, sizeof(file), "%s.cu", op_nickname);
	const Cuda_Source *s = cuda_find_source(file);
	if (!s)
		return 0;
	*name = s->name;
	*text = s->text;
	return 1;
}

/* One thread per element, BLOCK threads per block (n > 0: the ops' signatures). */
static void elementwise(int64_t n, Dataflow_Launch_Config *c)
{
	int64_t blocks = (n + BLOCK - 1) / BLOCK;
	c->grid[0] = (uint32_t)(blocks < MAX_GRID ? blocks : MAX_GRID);
	c->grid[1] = c->grid[2] = 1;
	c->block[0] = BLOCK;
	c->block[1] = c->block[2] = 1;
	c->shared_mem_bytes = 0;
}

/* The launch function of elementwise op OP: one thread per element of its n. */
#define ELEMENTWISE_LAUNCH(OP)                                                                         \
	Dataflow_Status dataflow_cuda_##OP##_launch(Dataflow_Handle *handle, const Op *op, void *op_state, \
						    Dataflow_Launch_Config *config)                \
	{                                                                                          \
		(void)handle;                                                                      \
		(void)op_state;                                                                    \
		elementwise(dataflow_##OP##_args(op->op_args).n, config);                          \
		return DATAFLOW_OK;                                                                \
	}

ELEMENTWISE_LAUNCH(add)
ELEMENTWISE_LAUNCH(scale)
ELEMENTWISE_LAUNCH(cast)
ELEMENTWISE_LAUNCH(set_mem)
