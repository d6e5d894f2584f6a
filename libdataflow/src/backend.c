#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "dataflow/backend.h"

Dataflow_Status dataflow_check_stream_id(const Dataflow_Handle *h, int stream_id, const char *what)
{
	if (stream_id < 0 || stream_id >= h->num_streams)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: stream id must be in [0, %d) for this handle, got %d", what,
					  h->num_streams, stream_id);
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_check_size_bytes(const char *what, uint64_t size)
{
	if (size == 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: size_bytes must be > 0, got 0", what);
	return DATAFLOW_OK;
}

/* Registration is rare, so one lock serves every handle's library set. */
static pthread_mutex_t libraries_lock = PTHREAD_MUTEX_INITIALIZER;

Dataflow_Status dataflow_libraries_open(Dataflow_Libraries *libs, const char *path, void **lib)
{
	if (!path)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "register: library path is NULL");
	*lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!*lib)
		return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED, "register: cannot load %s: %s", path, dlerror());
	pthread_mutex_lock(&libraries_lock);
	void **handles = realloc(libs->handles, (size_t)(libs->count + 1) * sizeof(void *));
	if (handles) {
		libs->handles = handles;
		handles[libs->count++] = *lib;
	}
	pthread_mutex_unlock(&libraries_lock);
	if (!handles) {
		dlclose(*lib);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "register: no memory");
	}
	return DATAFLOW_OK;
}

void dataflow_libraries_close(Dataflow_Libraries *libs)
{
	for (int i = 0; i < libs->count; i++)
		dlclose(libs->handles[i]);
	free(libs->handles);
	libs->handles = NULL;
	libs->count = 0;
}

Dataflow_Status dataflow_find_symbol(void *lib, const char *path, const char *const *symbols, int i,
				     const char *kind, const char *required, void **out)
{
	*out = NULL;
	const char *name = symbols ? symbols[i] : NULL;
	if (!name || !name[0]) {
		if (required)
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "register: %s symbol of op %d is missing%s",
						  kind, i, required);
		return DATAFLOW_OK;
	}
	dlerror();
	*out = dlsym(lib, name);
	if (!*out)
		return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED, "register: %s symbol '%s' not found in %s", kind,
					  name, path);
	return DATAFLOW_OK;
}

void dataflow_op_record_destroy(void *record)
{
	Dataflow_Op_Record *r = record;
	if (r && r->state.destroy)
		r->state.destroy(r->state.data);
	free(r);
}

static void batch_free(Dataflow_Op_Batch *b, int destroy_records)
{
	for (int i = 0; destroy_records && i < b->num_ops; i++)
		dataflow_op_record_destroy(b->records[i]);
	free(b->records);
	free(b->inits);
	b->records = NULL;
	b->inits = NULL;
}

Dataflow_Status dataflow_op_batch_begin(Dataflow_Op_Batch *batch, Dataflow_Handle *h, int num_ops,
					const Op_Skeleton *skeletons, const void *symbols, int flags,
					size_t record_size)
{
	int replace = (flags & DATAFLOW_REGISTER_REPLACE) != 0;
	Dataflow_Status st = dataflow_op_table_check_batch(h->op_table, num_ops, skeletons, symbols, replace);
	if (st != DATAFLOW_OK)
		return st;
	*batch = (Dataflow_Op_Batch){.handle = h, .num_ops = num_ops, .skeletons = skeletons, .replace = replace};
	batch->records = calloc((size_t)num_ops, sizeof(void *));
	batch->inits = calloc((size_t)num_ops, sizeof(Dataflow_Op_Init_Fn));
	int ok = batch->records && batch->inits && record_size >= sizeof(Dataflow_Op_Record);
	for (int i = 0; ok && i < num_ops; i++)
		ok = (batch->records[i] = calloc(1, record_size)) != NULL;
	if (ok)
		return DATAFLOW_OK;
	if (batch->records)
		batch_free(batch, 1); /* zeroed records: destroying one only frees it */
	else
		free(batch->inits);
	return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "register: no memory");
}

Dataflow_Status dataflow_op_batch_finish(Dataflow_Op_Batch *b, Dataflow_Status st)
{
	if (st != DATAFLOW_OK) {
		batch_free(b, 1);
		return st;
	}
	for (int i = 0; i < b->num_ops; i++) {
		Dataflow_Op_Record *r = b->records[i];
		r->skeleton = b->skeletons[i];
		if (b->inits[i] && (st = b->inits[i](b->handle, &b->skeletons[i], &r->state)) != DATAFLOW_OK) {
			char msg[1024];
			snprintf(msg, sizeof(msg), "%s", dataflow_last_error());
			batch_free(b, 1);
			return dataflow_set_error(st, "register: init of op '%s' failed: %s", b->skeletons[i].nickname, msg);
		}
	}
	/* Replacing an op must not pull it (or its state) from under queued work. */
	if (b->replace)
		b->handle->sync_handle(b->handle);
	for (int i = 0; i < b->num_ops; i++) {
		void *old = NULL;
		dataflow_op_table_insert(b->handle->op_table, &b->skeletons[i], b->records[i], b->replace, &old);
		dataflow_op_record_destroy(old);
	}
	batch_free(b, 0);
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_op_find_checked(Dataflow_Handle *h, const Op *op,
					 Dataflow_Status (*check_tensor)(void *ctx, const void *ptr, const char *what),
					 void *ctx, void **record)
{
	*record = NULL;
	if (!op)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "submit_op: op is NULL");
	Dataflow_Op_Record *r = dataflow_op_table_lookup(h->op_table, op->skeleton.fingerprint);
	if (!r)
		return dataflow_op_table_unknown_error(h->op_table, &op->skeleton);
	Dataflow_Status st = dataflow_op_check(op, &r->skeleton, check_tensor, ctx);
	if (st == DATAFLOW_OK)
		*record = r;
	return st;
}

Dataflow_Status dataflow_backend_register_external_code(Dataflow_Handle *h, Dataflow_Libraries *libs, size_t record_size,
						const char *required, const char *library_path, int num_ops,
						const Op_Skeleton *skeletons, const char *const *func_symbols,
						const char *const *init_symbols, int flags)
{
	Dataflow_Op_Batch b;
	Dataflow_Status st = dataflow_op_batch_begin(&b, h, num_ops, skeletons, func_symbols, flags, record_size);
	if (st != DATAFLOW_OK)
		return st;
	void *lib = NULL;
	st = dataflow_libraries_open(libs, library_path, &lib);
	for (int i = 0; i < num_ops && st == DATAFLOW_OK; i++) {
		Dataflow_Op_Record *r = b.records[i];
		void *func, *init;
		st = dataflow_find_symbol(lib, library_path, func_symbols, i, "external function", required, &func);
		if (st == DATAFLOW_OK)
			st = dataflow_find_symbol(lib, library_path, init_symbols, i, "init", NULL, &init);
		if (st == DATAFLOW_OK) {
			r->external = (Dataflow_External_Fn)func;
			b.inits[i] = (Dataflow_Op_Init_Fn)init;
		}
	}
	return dataflow_op_batch_finish(&b, st);
}

Dataflow_Status dataflow_backend_register_external_func(Dataflow_Handle *h, size_t record_size, const Op_Skeleton *skeleton,
						Dataflow_External_Fn func, const Dataflow_Op_State *state, int flags)
{
	Dataflow_Op_Batch b;
	Dataflow_Status st = dataflow_op_batch_begin(&b, h, 1, skeleton, (const void *)func, flags, record_size);
	if (st != DATAFLOW_OK)
		return st;
	Dataflow_Op_Record *r = b.records[0];
	r->external = func;
	if (state)
		r->state = *state;
	return dataflow_op_batch_finish(&b, st);
}
