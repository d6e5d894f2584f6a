#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "dataflow/op_args.h"
#include "vulkan_backend.h"

/* The default ops of the Vulkan backend: their launch functions (native ops) and matmul (an
 * external op over its own kernels), found by register_default_ops in this library
 * (dataflow_handle_default_ops_library); the kernels are the SPIR-V of shaders/, embedded by
 * the generated vulkan_shaders.c. */

#define GROUP 256         /* local_size_x of the 1-D kernels */
#define MAX_GROUPS 65535  /* kernels loop over the rest (grid-stride) */
#define MATMUL_TILE 64    /* matmul.comp's TILE */

/* The elementwise ops: one invocation per element of n (their first argument), GROUP per
 * workgroup; indices in the kernels are 32-bit. */
_Static_assert(DATAFLOW_ADD_ARG_N == 0 && DATAFLOW_SCALE_ARG_N == 0 && DATAFLOW_CAST_ARG_N == 0 &&
		       DATAFLOW_SET_MEM_ARG_N == 0,
	       "elementwise ops take n first");

static Dataflow_Status elementwise(const Op *op, Dataflow_Launch_Config *c)
{
	int64_t n = *(const int64_t *)op->op_args[0];
	if (n > (int64_t)UINT32_MAX)
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED, "%s (vulkan): n: at most %u elements, got %lld",
					  op->skeleton.nickname, UINT32_MAX, (long long)n);
	int64_t groups = (n + GROUP - 1) / GROUP;
	c->grid[0] = (uint32_t)(groups < MAX_GROUPS ? groups : MAX_GROUPS);
	c->grid[1] = c->grid[2] = 1;
	return DATAFLOW_OK;
}

#define ELEMENTWISE_LAUNCH(OP)                                                                         \
	Dataflow_Status dataflow_vulkan_##OP##_launch(Dataflow_Handle *handle, const Op *op, void *op_state,   \
						      Dataflow_Launch_Config *config)                  \
	{                                                                                          \
		(void)handle, (void)op_state;                                                      \
		return elementwise(op, config);                                                    \
	}

ELEMENTWISE_LAUNCH(add)
ELEMENTWISE_LAUNCH(scale)
ELEMENTWISE_LAUNCH(cast)
ELEMENTWISE_LAUNCH(set_mem)

/* ---- matmul: the variant's kernel, chosen at registration ---- */

/* A kernel this library exports (vulkan_shaders.c), by name. */
static const Dataflow_Vulkan_Shader *own_shader(const char *name)
{
	Dl_info self;
	if (!dladdr((void *)&own_shader, &self))
		return NULL;
	void *lib = dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD);
	const Dataflow_Vulkan_Shader *shader = lib ? dlsym(lib, name) : NULL;
	if (lib)
		dlclose(lib);
	return shader;
}

Dataflow_Status dataflow_vulkan_matmul_init(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
					    Dataflow_Op_State *state)
{
	(void)handle;
	char name[160];
	snprintf(name, sizeof(name), "dataflow_vulkan_matmul_%s_%s",
		 dataflow_datatype_name(skeleton->arg_dtypes[DATAFLOW_MATMUL_ARG_A]),
		 dataflow_datatype_name(skeleton->arg_dtypes[DATAFLOW_MATMUL_ARG_D]));
	const Dataflow_Vulkan_Shader *shader = own_shader(name);
	if (!shader)
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED, "matmul (vulkan): no kernel %s", name);
	Vulkan_Op *rec = calloc(1, sizeof(*rec));
	if (!rec)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "matmul (vulkan): no memory");
	rec->shader = shader;
	snprintf(rec->kernel_name, sizeof(rec->kernel_name), "%s", name);
	*state = (Dataflow_Op_State){rec, free};
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_vulkan_matmul(Dataflow_Handle *handle, int stream_id, const Op *op, void *op_state)
{
	Dataflow_Matmul_Args a = dataflow_matmul_args(op->op_args);
	if (a.M * a.K > (int64_t)UINT32_MAX || a.K * a.N > (int64_t)UINT32_MAX || a.M * a.N > (int64_t)UINT32_MAX)
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "matmul (vulkan): M = %lld, N = %lld, K = %lld: each operand must have at most %u "
					  "elements (32-bit indices)",
					  (long long)a.M, (long long)a.N, (long long)a.K, UINT32_MAX);
	int64_t gx = (a.N + MATMUL_TILE - 1) / MATMUL_TILE, gy = (a.M + MATMUL_TILE - 1) / MATMUL_TILE;
	uint32_t *max = vulkan_of(handle)->dev->props.limits.maxComputeWorkGroupCount;
	if (gx > max[0] || gy > max[1])
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "matmul (vulkan): M = %lld, N = %lld need %lld x %lld workgroups; the device "
					  "allows %u x %u",
					  (long long)a.M, (long long)a.N, (long long)gx, (long long)gy, max[0], max[1]);
	const uint32_t groups[3] = {(uint32_t)gx, (uint32_t)gy, 1};
	return vulkan_dispatch(vulkan_of(handle), stream_id, op_state, op, groups);
}
