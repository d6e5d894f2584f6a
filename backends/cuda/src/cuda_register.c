#include <dlfcn.h>
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
 *              default ops, from sources embedded at build time: handle->default_ops_library
 *              points at it).
 *   launch_library_path  the shared object holding the launch (required: they choose grid,
 *              block and shared memory) and init functions; NULL: code_path when it is a
 *              shared object.
 * Sources are compiled with NVRTC when one of their kernels first runs (cuda_submit.c).
 * As on host, everything is resolved and checked before the op table changes, so a failed
 * call registers nothing. */

typedef int (*Kernel_Source_Fn)(const char *op_nickname, const char **name, const char **text);

void cuda_op_destroy(void *value)
{
	Cuda_Op *op = value;
	if (op && op->state.destroy)
		op->state.destroy(op->state.data);
	free(op);
}

void cuda_modules_destroy(Cuda_Handle *h)
{
	for (Cuda_Module *m = h->modules, *next; m; m = next) {
		next = m->next;
		if (m->module)
			h->cu->cuModuleUnload(m->module);
		free(m->name);
		free(m->source);
		free(m->include_dir);
		free(m);
	}
	h->modules = NULL;
}

static Dataflow_Status open_library(Cuda_Handle *h, const char *path, void **lib)
{
	if (!path)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "register: library path is NULL");
	*lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!*lib)
		return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED, "register: cannot load %s: %s", path, dlerror());
	pthread_mutex_lock(&h->lock);
	void **libs = realloc(h->libraries, (size_t)(h->num_libraries + 1) * sizeof(void *));
	if (libs) {
		h->libraries = libs;
		libs[h->num_libraries++] = *lib;
	}
	pthread_mutex_unlock(&h->lock);
	if (!libs) {
		dlclose(*lib);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "register: no memory");
	}
	return DATAFLOW_OK;
}

static Dataflow_Status find_symbol(void *lib, const char *path, const char *const *symbols, int i, int required,
				   const char *kind, void **out)
{
	*out = NULL;
	const char *name = symbols ? symbols[i] : NULL;
	if (!name || !name[0])
		return required ? dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						     "register: %s symbol of op %d is missing (required on cuda)", kind, i)
				: DATAFLOW_OK;
	*out = dlsym(lib, name);
	if (!*out)
		return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED, "register: %s symbol '%s' not found in %s", kind,
					  name, path);
	return DATAFLOW_OK;
}

/* The module for (name, text): an existing one with the same text, or a new one. Takes
 * ownership of text. Called with h->lock held. */
static Cuda_Module *module_for(Cuda_Handle *h, const char *name, char *text, const char *include_dir)
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
				    const Op_Skeleton *skeletons, Cuda_Op **ops)
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
		pthread_mutex_lock(&h->lock);
		ops[i]->module = text ? module_for(h, name, text, source_of ? NULL : include_dir) : NULL;
		pthread_mutex_unlock(&h->lock);
		if (!ops[i]->module)
			return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "register: no memory for a module");
	}
	return DATAFLOW_OK;
}

/* Runs inits, then inserts; on failure frees every record of the batch. */
static Dataflow_Status install(Dataflow_Handle *h, Dataflow_Status st, int num_ops, const Op_Skeleton *skeletons,
			       Cuda_Op **ops, Dataflow_Op_Init_Fn *inits, int flags)
{
	int failed = -1;
	for (int i = 0; i < num_ops && st == DATAFLOW_OK; i++) {
		ops[i]->skeleton = skeletons[i];
		if (inits && inits[i] && (st = inits[i](h, &skeletons[i], &ops[i]->state)) != DATAFLOW_OK)
			failed = i;
	}
	if (st != DATAFLOW_OK) {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", dataflow_last_error());
		for (int i = 0; i < num_ops; i++)
			cuda_op_destroy(ops[i]);
		return failed < 0 ? dataflow_set_error(st, "%s", msg)
				  : dataflow_set_error(st, "register: init of op '%s' failed: %s",
						       skeletons[failed].nickname, msg);
	}
	/* Replacing an op must not pull it (or its state) from under queued work. */
	if (flags & DATAFLOW_REGISTER_REPLACE)
		cuda_sync_handle(h);
	for (int i = 0; i < num_ops; i++) {
		void *old = NULL;
		dataflow_op_table_insert(h->op_table, &skeletons[i], ops[i], flags & DATAFLOW_REGISTER_REPLACE, &old);
		cuda_op_destroy(old);
	}
	return DATAFLOW_OK;
}

static Dataflow_Status alloc_batch(int num_ops, Cuda_Op ***ops, Dataflow_Op_Init_Fn **inits)
{
	*ops = calloc((size_t)num_ops, sizeof(Cuda_Op *));
	*inits = calloc((size_t)num_ops, sizeof(Dataflow_Op_Init_Fn));
	int ok = *ops && *inits;
	for (int i = 0; ok && i < num_ops; i++)
		ok = ((*ops)[i] = calloc(1, sizeof(Cuda_Op))) != NULL;
	if (ok)
		return DATAFLOW_OK;
	for (int i = 0; *ops && i < num_ops; i++)
		free((*ops)[i]);
	free(*ops);
	free(*inits);
	return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "register: no memory");
}

Dataflow_Status cuda_register_native_code(Dataflow_Handle *h, const char *code_path, const char *launch_library_path,
					  int num_ops, const Op_Skeleton *skeletons, const char *const *kernel_symbols,
					  const char *const *launch_symbols, const char *const *init_symbols,
					  int flags)
{
	Cuda_Handle *ch = cuda_of(h);
	Dataflow_Status st = dataflow_op_table_check_batch(h->op_table, num_ops, skeletons, kernel_symbols,
							   flags & DATAFLOW_REGISTER_REPLACE);
	if (st == DATAFLOW_OK && !code_path)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "register: code path is NULL");
	void *code_lib = NULL, *launch_lib = NULL;
	int is_source = st == DATAFLOW_OK && ends_with(code_path, ".cu");
	if (st == DATAFLOW_OK && !is_source)
		st = open_library(ch, code_path, &code_lib);
	const char *launch_path = launch_library_path ? launch_library_path : code_path;
	if (st == DATAFLOW_OK && launch_library_path)
		st = open_library(ch, launch_library_path, &launch_lib);
	else if (st == DATAFLOW_OK && is_source)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"register: %s is CUDA source; pass launch_library_path, the shared object with "
					"its launch functions",
					code_path);
	else
		launch_lib = code_lib;
	Cuda_Op **ops;
	Dataflow_Op_Init_Fn *inits;
	if (st == DATAFLOW_OK)
		st = alloc_batch(num_ops, &ops, &inits);
	if (st != DATAFLOW_OK)
		return st;
	for (int i = 0; i < num_ops && st == DATAFLOW_OK; i++) {
		void *launch, *init;
		st = find_symbol(launch_lib, launch_path, launch_symbols, i, 1, "launch", &launch);
		if (st == DATAFLOW_OK)
			st = find_symbol(launch_lib, launch_path, init_symbols, i, 0, "init", &init);
		size_t len = kernel_symbols[i] ? strlen(kernel_symbols[i]) : 0;
		if (st == DATAFLOW_OK && (len == 0 || len >= sizeof(ops[i]->kernel_name)))
			st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						"register: kernel symbol of op %d must be 1..%zu characters", i,
						sizeof(ops[i]->kernel_name) - 1);
		if (st == DATAFLOW_OK) {
			snprintf(ops[i]->kernel_name, sizeof(ops[i]->kernel_name), "%s", kernel_symbols[i]);
			ops[i]->launch = (Dataflow_Launch_Fn)launch;
			inits[i] = (Dataflow_Op_Init_Fn)init;
		}
	}
	if (st == DATAFLOW_OK)
		st = find_modules(ch, code_path, code_lib, num_ops, skeletons, ops);
	st = install(h, st, num_ops, skeletons, ops, inits, flags);
	free(ops);
	free(inits);
	return st;
}

Dataflow_Status cuda_register_external_code(Dataflow_Handle *h, const char *library_path, int num_ops,
					    const Op_Skeleton *skeletons, const char *const *func_symbols,
					    const char *const *init_symbols, int flags)
{
	Dataflow_Status st = dataflow_op_table_check_batch(h->op_table, num_ops, skeletons, func_symbols,
							   flags & DATAFLOW_REGISTER_REPLACE);
	void *lib = NULL;
	if (st == DATAFLOW_OK)
		st = open_library(cuda_of(h), library_path, &lib);
	Cuda_Op **ops;
	Dataflow_Op_Init_Fn *inits;
	if (st == DATAFLOW_OK)
		st = alloc_batch(num_ops, &ops, &inits);
	if (st != DATAFLOW_OK)
		return st;
	for (int i = 0; i < num_ops && st == DATAFLOW_OK; i++) {
		void *func, *init;
		st = find_symbol(lib, library_path, func_symbols, i, 1, "external function", &func);
		if (st == DATAFLOW_OK)
			st = find_symbol(lib, library_path, init_symbols, i, 0, "init", &init);
		if (st == DATAFLOW_OK) {
			ops[i]->external = (Dataflow_External_Fn)func;
			inits[i] = (Dataflow_Op_Init_Fn)init;
		}
	}
	st = install(h, st, num_ops, skeletons, ops, inits, flags);
	free(ops);
	free(inits);
	return st;
}

Dataflow_Status cuda_register_external_func(Dataflow_Handle *h, const Op_Skeleton *skeleton,
					    Dataflow_External_Fn func, const Dataflow_Op_State *state, int flags)
{
	Dataflow_Status st = dataflow_op_table_check_batch(h->op_table, 1, skeleton, (const void *)func,
							   flags & DATAFLOW_REGISTER_REPLACE);
	Cuda_Op **ops;
	Dataflow_Op_Init_Fn *inits;
	if (st == DATAFLOW_OK)
		st = alloc_batch(1, &ops, &inits);
	if (st != DATAFLOW_OK)
		return st;
	ops[0]->external = func;
	if (state)
		ops[0]->state = *state;
	st = install(h, st, 1, skeleton, ops, inits, flags);
	free(ops);
	free(inits);
	return st;
}
