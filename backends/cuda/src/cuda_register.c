#include <dlfcn.h> /* dlsym of dataflow_cuda_kernel_source */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"

/* register_native_code on CUDA:
 *   code_path  a CUDA C++ source (.cu): every kernel of the call is an extern "C"
 *              __global__ function of it; or a shared object exporting
 *                int dataflow_cuda_kernel_source(const char *op_nickname, const char **name,
 *                                                const char **text)
 *              which gives the CUDA C++ source of each op (libdataflow_cuda.so does, for the
 *              default ops, from sources embedded at build time: dataflow_handle_default_ops_library
 *              points at it).
 *   launch_library_path  the shared object holding the launch (required: they choose grid,
 *              block and shared memory) and init functions; NULL: code_path when it is a
 *              shared object.
 * Sources are compiled with NVRTC when one of their kernels first runs (cuda_submit.c).
 * Everything is resolved before anything is registered. */

typedef int (*Kernel_Source_Fn)(const char *op_nickname, const char **name, const char **text);

void cuda_modules_destroy(Cuda_Handle *h)
{
	for (Cuda_Module *m = h->modules, *next; m; m = next) {
		next = m->next;
		if (m->module)
			h->cu->cuModuleUnload(m->module);
		free(m->name);
		free(m->source);
		free(m->include_dir);
		pthread_mutex_destroy(&m->lock);
		free(m);
	}
	h->modules = NULL;
}

/* (cuda_backend.h) */
Cuda_Module *cuda_module_for(Cuda_Handle *h, const char *name, char *text, const char *include_dir)
{
	for (Cuda_Module *m = h->modules; m; m = m->next) {
		if (!strcmp(m->name, name) && !strcmp(m->source, text)) {
			free(text);
			return m;
		}
	}
	Cuda_Module *m = calloc(1, sizeof(*m));
	if (m) {
		m->name = strdup(name);
		m->include_dir = include_dir ? strdup(include_dir) : NULL;
		m->source = text;
	}
	if (!m || !m->name || (include_dir && !m->include_dir)) {
		if (m) {
			free(m->name);
			free(m->include_dir);
		}
		free(m);
		free(text);
		return NULL;
	}
	pthread_mutex_init(&m->lock, NULL);
	m->next = h->modules;
	h->modules = m;
	return m;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

/* Each op's module: the .cu file for all, or the shared object's source per nickname. */
static Dataflow_Status find_modules(Cuda_Handle *h, const char *code_path, void *code_lib, int num_ops,
				    const Op_Skeleton *skeletons, void *const *records)
{
	Kernel_Source_Fn source_of = NULL;
	if (code_lib && !(source_of = (Kernel_Source_Fn)dlsym(code_lib, "dataflow_cuda_kernel_source")))
		return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED,
					  "register: %s is neither a .cu source nor a library exporting "
					  "dataflow_cuda_kernel_source",
					  code_path);
	for (int i = 0; i < num_ops; i++) {
		const char *name = code_path, *embedded = NULL;
		char *text = NULL, include_dir[4096] = "";
		if (source_of) {
			if (!source_of(skeletons[i].nickname, &name, &embedded))
				return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
							  "register: %s has no CUDA kernel source for op '%s'", code_path,
							  skeletons[i].nickname);
			text = strdup(embedded);
		} else {
			Dataflow_Status st = cuda_read_source(code_path, &text, include_dir, sizeof(include_dir));
			if (st != DATAFLOW_OK)
				return st;
		}
		Cuda_Op *op = records[i];
		pthread_mutex_lock(&h->lock);
		op->module = text ? cuda_module_for(h, name, text, source_of ? NULL : include_dir) : NULL;
		pthread_mutex_unlock(&h->lock);
		if (!op->module)
			return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "register: no memory for a module");
	}
	return DATAFLOW_OK;
}

Dataflow_Status cuda_load_native_code(Dataflow_Handle *h, const char *code_path, const char *launch_library_path,
				      int num_ops, const Op_Skeleton *skeletons, const char *const *kernel_symbols,
				      const char *const *launch_symbols, const char *const *init_symbols, void **records,
				      Dataflow_Op_Init_Fn *inits)
{
	Dataflow_Status st = DATAFLOW_OK;
	if (!code_path)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "register: code path is NULL");
	void *code_lib = NULL, *launch_lib = NULL;
	int is_source = st == DATAFLOW_OK && ends_with(code_path, ".cu");
	if (st == DATAFLOW_OK && !is_source)
		st = dataflow_libraries_open(h, code_path, &code_lib);
	const char *launch_path = launch_library_path ? launch_library_path : code_path;
	if (st == DATAFLOW_OK && launch_library_path)
		st = dataflow_libraries_open(h, launch_library_path, &launch_lib);
	else if (st == DATAFLOW_OK && is_source)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"register: %s is CUDA source; pass launch_library_path, the shared object with "
					"its launch functions",
					code_path);
	else
		launch_lib = code_lib;
	for (int i = 0; i < num_ops && st == DATAFLOW_OK; i++) {
		void *launch, *init;
		st = dataflow_find_symbol(launch_lib, launch_path, launch_symbols, i, "launch", " (required on cuda)",
					  &launch);
		if (st == DATAFLOW_OK)
			st = dataflow_find_symbol(launch_lib, launch_path, init_symbols, i, "init", NULL, &init);
		size_t len = kernel_symbols[i] ? strlen(kernel_symbols[i]) : 0;
		Cuda_Op *op = NULL;
		if (st == DATAFLOW_OK && (len == 0 || len >= sizeof(op->kernel_name)))
			st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						"register: kernel symbol of op %d must be 1..%zu characters", i,
						sizeof(op->kernel_name) - 1);
		if (st == DATAFLOW_OK && !(op = calloc(1, sizeof(*op))))
			st = dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "register: no memory");
		if (op) {
			snprintf(op->kernel_name, sizeof(op->kernel_name), "%s", kernel_symbols[i]);
			op->launch = (Dataflow_Launch_Fn)launch;
			records[i] = op;
			inits[i] = (Dataflow_Op_Init_Fn)init;
		}
	}
	if (st == DATAFLOW_OK)
		st = find_modules(cuda_of(h), code_path, code_lib, num_ops, skeletons, records);
	return st;
}
