#include <stdlib.h>
#include <string.h>

#include "host.h"

/* Native code on the host backend: a shared object of C kernels (one call per part) and,
 * in it or in launch_library_path, each op's optional launch and init functions. Every symbol
 * is resolved before anything is registered. */

Dataflow_Status host_load_native_code(Dataflow_Handle *h, const char *code_path, const char *launch_library_path,
				      int num_ops, const Op_Skeleton *skeletons, const char *const *kernel_symbols,
				      const char *const *launch_symbols, const char *const *init_symbols, void **records,
				      Dataflow_Op_Init_Fn *inits)
{
	(void)skeletons;
	void *code = NULL, *launch_lib = NULL;
	Dataflow_Status st = dataflow_libraries_open(h, code_path, &code);
	if (st == DATAFLOW_OK && launch_library_path && strcmp(launch_library_path, code_path) != 0)
		st = dataflow_libraries_open(h, launch_library_path, &launch_lib);
	else
		launch_lib = code;
	const char *launch_path = launch_library_path ? launch_library_path : code_path;
	for (int i = 0; i < num_ops && st == DATAFLOW_OK; i++) {
		void *kernel, *launch, *init;
		st = dataflow_find_symbol(code, code_path, kernel_symbols, i, "kernel", "", &kernel);
		if (st == DATAFLOW_OK)
			st = dataflow_find_symbol(launch_lib, launch_path, launch_symbols, i, "launch", NULL, &launch);
		if (st == DATAFLOW_OK)
			st = dataflow_find_symbol(launch_lib, launch_path, init_symbols, i, "init", NULL, &init);
		Host_Op *op = st == DATAFLOW_OK ? malloc(sizeof(*op)) : NULL;
		if (st == DATAFLOW_OK && !op)
			st = dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "register: no memory");
		if (op) {
			*op = (Host_Op){(Dataflow_Host_Kernel)kernel, (Dataflow_Launch_Fn)launch};
			records[i] = op;
			inits[i] = (Dataflow_Op_Init_Fn)init;
		}
	}
	return st;
}
