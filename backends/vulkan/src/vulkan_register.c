#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan_backend.h"

/* register_native_code on Vulkan:
 *   code_path  a shared object exporting each kernel as a Dataflow_Vulkan_Shader (SPIR-V
 *              words; libdataflow_vulkan.so does for the default ops, compiled with glslc at
 *              build time: dataflow_handle_default_ops_library points at it). A kernel's
 *              arguments arrive as one push-constant block in the skeleton's order, tensors as
 *              64-bit buffer device addresses (GL_EXT_buffer_reference), scalars as their C
 *              type, each aligned to its size (std430).
 *   launch_library_path  the shared object with the launch (required: it chooses the
 *              workgroup count in grid[]; the workgroup size is the shader's) and init
 *              functions; NULL: code_path.
 * Pipelines are made when a kernel first runs (vulkan_submit.c). */

Dataflow_Status vulkan_load_native_code(Dataflow_Handle *h, const char *code_path, const char *launch_library_path,
					int num_ops, const Op_Skeleton *skeletons, const char *const *kernel_symbols,
					const char *const *launch_symbols, const char *const *init_symbols,
					void **records, Dataflow_Op_Init_Fn *inits)
{
	(void)skeletons;
	void *code_lib = NULL, *launch_lib = NULL;
	Dataflow_Status st = dataflow_libraries_open(h, code_path, &code_lib);
	const char *launch_path = launch_library_path ? launch_library_path : code_path;
	if (st == DATAFLOW_OK && launch_library_path)
		st = dataflow_libraries_open(h, launch_library_path, &launch_lib);
	else
		launch_lib = code_lib;
	for (int i = 0; i < num_ops && st == DATAFLOW_OK; i++) {
		void *shader = NULL, *launch = NULL, *init = NULL;
		st = dataflow_find_symbol(code_lib, code_path, kernel_symbols, i, "kernel", "", &shader);
		if (st == DATAFLOW_OK)
			st = dataflow_find_symbol(launch_lib, launch_path, launch_symbols, i, "launch",
						  " (required on vulkan)", &launch);
		if (st == DATAFLOW_OK)
			st = dataflow_find_symbol(launch_lib, launch_path, init_symbols, i, "init", NULL, &init);
		Vulkan_Op *op = NULL;
		if (st == DATAFLOW_OK && strlen(kernel_symbols[i]) >= sizeof(op->kernel_name))
			st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						"register: kernel symbol of op %d must be 1..%zu characters", i,
						sizeof(op->kernel_name) - 1);
		const Dataflow_Vulkan_Shader *s = shader;
		if (st == DATAFLOW_OK && (!s->words || s->size_bytes == 0 || s->size_bytes % 4))
			st = dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED,
						"register: kernel '%s' in %s is not SPIR-V (a Dataflow_Vulkan_Shader with "
						"a non-empty, whole number of 32-bit words)",
						kernel_symbols[i], code_path);
		if (st == DATAFLOW_OK && !(op = calloc(1, sizeof(*op))))
			st = dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "register: no memory");
		if (op) {
			op->shader = s;
			snprintf(op->kernel_name, sizeof(op->kernel_name), "%s", kernel_symbols[i]);
			op->launch = (Dataflow_Launch_Fn)launch;
			records[i] = op;
			inits[i] = (Dataflow_Op_Init_Fn)init;
		}
	}
	return st;
}
