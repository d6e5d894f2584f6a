#include <string.h>

#include "host.h"

/* Registration resolves every symbol and checks every fingerprint before touching the op
 * table, so a failed call registers nothing and leaves existing ops as they were (the batch
 * helpers of dataflow/backend.h). */

Dataflow_Status host_register_native_code(Dataflow_Handle *h, const char *code_path, const char *launch_library_path,
					  int num_ops, const Op_Skeleton *skeletons, const char *const *kernel_symbols,
					  const char *const *launch_symbols, const char *const *init_symbols,
					  int flags)
{
	Dataflow_Op_Batch b;
	Dataflow_Status st = dataflow_op_batch_begin(&b, h, num_ops, skeletons, kernel_symbols, flags, sizeof(Host_Op));
	if (st != DATAFLOW_OK)
		return st;
	Dataflow_Libraries *libs = &host_of(h)->libraries;
	void *code = NULL, *launch_lib = NULL;
	st = dataflow_libraries_open(libs, code_path, &code);
	if (st == DATAFLOW_OK && launch_library_path && strcmp(launch_library_path, code_path) != 0)
		st = dataflow_libraries_open(libs, launch_library_path, &launch_lib);
	else
		launch_lib = code;
	const char *launch_path = launch_library_path ? launch_library_path : code_path;
	for (int i = 0; i < num_ops && st == DATAFLOW_OK; i++) {
		Host_Op *op = b.records[i];
		void *kernel, *launch, *init;
		st = dataflow_find_symbol(code, code_path, kernel_symbols, i, "kernel", "", &kernel);
		if (st == DATAFLOW_OK)
			st = dataflow_find_symbol(launch_lib, launch_path, launch_symbols, i, "launch", NULL, &launch);
		if (st == DATAFLOW_OK)
			st = dataflow_find_symbol(launch_lib, launch_path, init_symbols, i, "init", NULL, &init);
		if (st == DATAFLOW_OK) {
			op->kernel = (Dataflow_Host_Kernel)kernel;
			op->launch = (Dataflow_Launch_Fn)launch;
			b.inits[i] = (Dataflow_Op_Init_Fn)init;
		}
	}
	return dataflow_op_batch_finish(&b, st);
}

Dataflow_Status host_register_external_code(Dataflow_Handle *h, const char *library_path, int num_ops,
					    const Op_Skeleton *skeletons, const char *const *func_symbols,
					    const char *const *init_symbols, int flags)
{
	return dataflow_backend_register_external_code(h, &host_of(h)->libraries, sizeof(Host_Op), "", library_path, num_ops,
					       skeletons, func_symbols, init_symbols, flags);
}

Dataflow_Status host_register_external_func(Dataflow_Handle *h, const Op_Skeleton *skeleton,
					    Dataflow_External_Fn func, const Dataflow_Op_State *state, int flags)
{
	return dataflow_backend_register_external_func(h, sizeof(Host_Op), skeleton, func, state, flags);
}
