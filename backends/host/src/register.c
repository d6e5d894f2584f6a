#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host.h"

/* Registration resolves every symbol and checks every fingerprint before touching the op
 * table, so a failed call registers nothing and leaves existing ops as they were. */

void host_op_destroy(void *value)
{
	Host_Op *op = value;
	if (op && op->state.destroy)
		op->state.destroy(op->state.data);
	free(op);
}

static Dataflow_Status open_library(Host_Handle *h, const char *path, void **lib)
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

/* symbols may be NULL, and entries may be NULL or "", when the symbol is optional. */
static Dataflow_Status find_symbol(void *lib, const char *path, const char *const *symbols, int i, int required,
				   const char *kind, void **out)
{
	*out = NULL;
	const char *name = symbols ? symbols[i] : NULL;
	if (!name || !name[0]) {
		if (required)
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "register: %s symbol of op %d is missing",
						  kind, i);
		return DATAFLOW_OK;
	}
	dlerror();
	*out = dlsym(lib, name);
	if (!*out)
		return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED, "register: %s symbol '%s' not found in %s", kind,
					  name, path);
	return DATAFLOW_OK;
}

/* Runs inits and inserts the prepared records; on failure releases what is not inserted. */
static Dataflow_Status install(Dataflow_Handle *h, int num_ops, const Op_Skeleton *skeletons, Host_Op **ops,
			       Dataflow_Op_Init_Fn *inits, int flags)
{
	Dataflow_Status st = DATAFLOW_OK;
	int initialized = 0;
	for (; initialized < num_ops && st == DATAFLOW_OK; initialized++) {
		ops[initialized]->skeleton = skeletons[initialized];
		if (inits && inits[initialized])
			st = inits[initialized](h, &skeletons[initialized], &ops[initialized]->state);
	}
	if (st != DATAFLOW_OK) {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", dataflow_last_error());
		for (int i = 0; i < num_ops; i++)
			host_op_destroy(ops[i]);
		return dataflow_set_error(st, "register: init of op '%s' failed: %s", skeletons[initialized - 1].nickname,
					  msg);
	}
	/* Replacing an op must not pull it from under queued work. */
	if (flags & DATAFLOW_REGISTER_REPLACE)
		host_sync_handle(h);
	for (int i = 0; i < num_ops; i++) {
		void *old = NULL;
		dataflow_op_table_insert(h->op_table, &skeletons[i], ops[i], flags & DATAFLOW_REGISTER_REPLACE, &old);
		host_op_destroy(old);
	}
	return DATAFLOW_OK;
}

/* One registration call's records, filled symbol by symbol, then installed or dropped. */
typedef struct {
	Host_Op **ops;
	Dataflow_Op_Init_Fn *inits;
} Batch;

static Dataflow_Status batch_alloc(Batch *b, int num_ops)
{
	b->ops = calloc((size_t)num_ops, sizeof(Host_Op *));
	b->inits = calloc((size_t)num_ops, sizeof(Dataflow_Op_Init_Fn));
	for (int i = 0; b->ops && i < num_ops; i++)
		b->ops[i] = calloc(1, sizeof(Host_Op));
	for (int i = 0; b->ops && b->inits && i < num_ops; i++)
		if (!b->ops[i])
			goto fail;
	if (b->ops && b->inits)
		return DATAFLOW_OK;
fail:
	for (int i = 0; b->ops && i < num_ops; i++)
		free(b->ops[i]);
	free(b->ops);
	free(b->inits);
	return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "register: no memory");
}

/* Installs the batch if every symbol was found (st == OK), else frees it; returns the outcome. */
static Dataflow_Status batch_finish(Dataflow_Handle *h, Dataflow_Status st, Batch *b, int num_ops,
				    const Op_Skeleton *skeletons, int flags)
{
	if (st == DATAFLOW_OK)
		st = install(h, num_ops, skeletons, b->ops, b->inits, flags);
	else
		for (int i = 0; i < num_ops; i++)
			free(b->ops[i]);
	free(b->ops);
	free(b->inits);
	return st;
}

Dataflow_Status host_register_native_code(Dataflow_Handle *h, const char *code_path, const char *launch_library_path,
					  int num_ops, const Op_Skeleton *skeletons, const char *const *kernel_symbols,
					  const char *const *launch_symbols, const char *const *init_symbols,
					  int flags)
{
	Dataflow_Status st = dataflow_op_table_check_batch(h->op_table, num_ops, skeletons, kernel_symbols,
							   flags & DATAFLOW_REGISTER_REPLACE);
	void *code = NULL, *launch_lib = NULL;
	if (st == DATAFLOW_OK)
		st = open_library(host_of(h), code_path, &code);
	if (st == DATAFLOW_OK && launch_library_path && strcmp(launch_library_path, code_path) != 0)
		st = open_library(host_of(h), launch_library_path, &launch_lib);
	else
		launch_lib = code;
	Batch b;
	if (st == DATAFLOW_OK)
		st = batch_alloc(&b, num_ops);
	if (st != DATAFLOW_OK)
		return st;
	const char *launch_path = launch_library_path ? launch_library_path : code_path;
	for (int i = 0; i < num_ops && st == DATAFLOW_OK; i++) {
		void *kernel, *launch, *init;
		st = find_symbol(code, code_path, kernel_symbols, i, 1, "kernel", &kernel);
		if (st == DATAFLOW_OK)
			st = find_symbol(launch_lib, launch_path, launch_symbols, i, 0, "launch", &launch);
		if (st == DATAFLOW_OK)
			st = find_symbol(launch_lib, launch_path, init_symbols, i, 0, "init", &init);
		if (st == DATAFLOW_OK) {
			b.ops[i]->kernel = (Dataflow_Host_Kernel)kernel;
			b.ops[i]->launch = (Dataflow_Launch_Fn)launch;
			b.inits[i] = (Dataflow_Op_Init_Fn)init;
		}
	}
	return batch_finish(h, st, &b, num_ops, skeletons, flags);
}

Dataflow_Status host_register_external_code(Dataflow_Handle *h, const char *library_path, int num_ops,
					    const Op_Skeleton *skeletons, const char *const *func_symbols,
					    const char *const *init_symbols, int flags)
{
	Dataflow_Status st = dataflow_op_table_check_batch(h->op_table, num_ops, skeletons, func_symbols,
							   flags & DATAFLOW_REGISTER_REPLACE);
	void *lib = NULL;
	if (st == DATAFLOW_OK)
		st = open_library(host_of(h), library_path, &lib);
	Batch b;
	if (st == DATAFLOW_OK)
		st = batch_alloc(&b, num_ops);
	if (st != DATAFLOW_OK)
		return st;
	for (int i = 0; i < num_ops && st == DATAFLOW_OK; i++) {
		void *func, *init;
		st = find_symbol(lib, library_path, func_symbols, i, 1, "external function", &func);
		if (st == DATAFLOW_OK)
			st = find_symbol(lib, library_path, init_symbols, i, 0, "init", &init);
		if (st == DATAFLOW_OK) {
			b.ops[i]->external = (Dataflow_External_Fn)func;
			b.inits[i] = (Dataflow_Op_Init_Fn)init;
		}
	}
	return batch_finish(h, st, &b, num_ops, skeletons, flags);
}

Dataflow_Status host_register_external_func(Dataflow_Handle *h, const Op_Skeleton *skeleton,
					    Dataflow_External_Fn func, const Dataflow_Op_State *state, int flags)
{
	Dataflow_Status st = dataflow_op_table_check_batch(h->op_table, 1, skeleton, (const void *)func,
							   flags & DATAFLOW_REGISTER_REPLACE);
	if (st != DATAFLOW_OK)
		return st;
	Batch b;
	st = batch_alloc(&b, 1);
	if (st != DATAFLOW_OK)
		return st;
	b.ops[0]->external = func;
	if (state)
		b.ops[0]->state = *state;
	return batch_finish(h, st, &b, 1, skeleton, flags);
}
