#include <stdio.h>
#include <stdlib.h>

#include "handle_internal.h"

/* Registration: the dispatch layer checks the batch and compiles the ops' signatures, the
 * backend loads native code (external functions are resolved here, the same for every
 * backend), the ops' inits run in order, and only then does the op table change, so a failed
 * call registers nothing. */

void op_entry_destroy(Dataflow_Op_Entry *e)
{
	if (!e)
		return;
	if (e->state.destroy)
		e->state.destroy(e->state.data);
	dataflow_op_signature_destroy(e->signature);
	free(e->record);
	free(e);
}

typedef struct {
	Dataflow_Handle *h;
	int num_ops;
	const Op_Skeleton *skeletons;
	int replace;
	Dataflow_Op_Entry **entries;
	Dataflow_Op_Init_Fn *inits;
} Batch;

static void batch_free(Batch *b, int destroy_entries)
{
	for (int i = 0; destroy_entries && b->entries && i < b->num_ops; i++)
		op_entry_destroy(b->entries[i]);
	free(b->entries);
	free(b->inits);
}

static Dataflow_Status compile_signature(const char *text, const Op_Skeleton *skeleton, int index,
					 Dataflow_Op_Signature **out)
{
	Dataflow_Status st = dataflow_op_signature_compile(text, skeleton, out);
	if (st == DATAFLOW_OK)
		return st;
	char msg[1024];
	snprintf(msg, sizeof(msg), "%s", dataflow_last_error());
	return dataflow_set_error(st, "register: the signature of op %d ('%s') does not compile: %s", index,
				  skeleton->nickname, msg);
}

/* Checks the call, then allocates num_ops zeroed entries, each with its op's compiled
 * signature (signatures may be NULL, and an entry: none). */
static Dataflow_Status batch_begin(Batch *b, Dataflow_Handle *h, int num_ops, const Op_Skeleton *skeletons,
				   const void *symbols, const char *const *signatures, int flags)
{
	*b = (Batch){.h = h, .num_ops = num_ops, .skeletons = skeletons, .replace = (flags & DATAFLOW_REGISTER_REPLACE) != 0};
	Dataflow_Status st = dataflow_op_table_check_batch(h->op_table, num_ops, skeletons, symbols, b->replace);
	if (st != DATAFLOW_OK)
		return st;
	/* A submission holds the op table while its op code runs, and replacing waits for the
	 * queued work that uses the old ops: neither from there. */
	if (in_op_code(h) || (b->replace && h->iface->on_worker(h)))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "register: called from %s; register from outside it",
					  in_op_code(h) ? "an op's launch, init or external function"
							: "work queued on this handle, which replacing ops waits for");
	b->entries = calloc((size_t)num_ops, sizeof(*b->entries));
	b->inits = calloc((size_t)num_ops, sizeof(*b->inits));
	int ok = b->entries && b->inits;
	for (int i = 0; ok && i < num_ops; i++)
		ok = (b->entries[i] = calloc(1, sizeof(Dataflow_Op_Entry))) != NULL;
	st = ok ? DATAFLOW_OK : dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "register: no memory");
	for (int i = 0; st == DATAFLOW_OK && signatures && i < num_ops; i++)
		if (signatures[i])
			st = compile_signature(signatures[i], &skeletons[i], i, &b->entries[i]->signature);
	if (st != DATAFLOW_OK)
		batch_free(b, 1);
	return st;
}

/* Ends the call. st != OK (loading failed): destroys every entry and returns st. Else runs the
 * inits in order (the first failure destroys every entry), inserts every entry, and on replace
 * destroys the replaced ones once nothing uses them. */
static Dataflow_Status batch_finish(Batch *b, Dataflow_Status st)
{
	op_code_begin(b->h);
	for (int i = 0; i < b->num_ops && st == DATAFLOW_OK; i++) {
		Dataflow_Op_Entry *e = b->entries[i];
		e->skeleton = b->skeletons[i];
		if (b->inits[i] && (st = b->inits[i](b->h, &e->skeleton, &e->state)) != DATAFLOW_OK) {
			char msg[1024];
			snprintf(msg, sizeof(msg), "%s", dataflow_last_error());
			st = dataflow_set_error(st, "register: init of op '%s' failed: %s", e->skeleton.nickname, msg);
		}
	}
	op_code_end();
	Dataflow_Op_Entry **old = st == DATAFLOW_OK ? calloc((size_t)b->num_ops, sizeof(*old)) : NULL;
	if (st == DATAFLOW_OK && !old)
		st = dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "register: no memory");
	if (st != DATAFLOW_OK) {
		batch_free(b, 1);
		return st;
	}
	int inserted = 0, replaced = 0;
	for (; inserted < b->num_ops && st == DATAFLOW_OK; inserted++)
		st = dataflow_op_table_insert(b->h->op_table, b->entries[inserted], b->replace, &old[inserted]);
	if (st != DATAFLOW_OK) /* a concurrent registration of the same op won: drop the rest */
		for (int i = inserted - 1; i < b->num_ops; i++)
			op_entry_destroy(b->entries[i]);
	for (int i = 0; i < b->num_ops; i++)
		replaced += old[i] != NULL;
	if (replaced)
		handle_wait_idle(b->h); /* queued work may still run the old ops */
	for (int i = 0; i < b->num_ops; i++)
		op_entry_destroy(old[i]);
	free(old);
	batch_free(b, 0);
	return st;
}

Dataflow_Status dataflow_register_native_code(Dataflow_Handle *h, const char *code_path,
					      const char *launch_library_path, int num_ops,
					      const Op_Skeleton *skeletons, const char *const *kernel_symbols,
					      const char *const *launch_symbols, const char *const *init_symbols,
					      const char *const *signatures, int flags)
{
	Batch b;
	HANDLE_ENTER(h, "register_native_code");
	Dataflow_Status st = batch_begin(&b, h, num_ops, skeletons, kernel_symbols, signatures, flags);
	if (st == DATAFLOW_OK) {
		void **records = calloc((size_t)num_ops, sizeof(void *));
		st = records ? h->iface->load_native_code(h, code_path, launch_library_path, num_ops, skeletons,
							  kernel_symbols, launch_symbols, init_symbols, records, b.inits)
			     : dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "register: no memory");
		for (int i = 0; records && i < num_ops; i++)
			b.entries[i]->record = records[i];
		free(records);
		st = batch_finish(&b, st);
	}
	return handle_leave(h, st);
}

Dataflow_Status dataflow_register_external_code(Dataflow_Handle *h, const char *library_path, int num_ops,
						const Op_Skeleton *skeletons, const char *const *func_symbols,
						const char *const *init_symbols, const char *const *signatures,
						int flags)
{
	Batch b;
	HANDLE_ENTER(h, "register_external_code");
	Dataflow_Status st = batch_begin(&b, h, num_ops, skeletons, func_symbols, signatures, flags);
	if (st == DATAFLOW_OK) {
		void *lib = NULL;
		st = dataflow_libraries_open(h, library_path, &lib);
		for (int i = 0; i < num_ops && st == DATAFLOW_OK; i++) {
			void *func, *init;
			st = dataflow_find_symbol(lib, library_path, func_symbols, i, "external function", "", &func);
			if (st == DATAFLOW_OK)
				st = dataflow_find_symbol(lib, library_path, init_symbols, i, "init", NULL, &init);
			if (st == DATAFLOW_OK) {
				b.entries[i]->external = (Dataflow_External_Fn)func;
				b.inits[i] = (Dataflow_Op_Init_Fn)init;
			}
		}
		st = batch_finish(&b, st);
	}
	return handle_leave(h, st);
}

Dataflow_Status dataflow_register_external_func(Dataflow_Handle *h, const Op_Skeleton *skeleton,
						Dataflow_External_Fn func, const Dataflow_Op_State *state,
						const char *signature, int flags)
{
	Batch b;
	HANDLE_ENTER(h, "register_external_func");
	Dataflow_Status st = batch_begin(&b, h, 1, skeleton, (const void *)func, &signature, flags);
	if (st == DATAFLOW_OK) {
		b.entries[0]->external = func;
		if (state)
			b.entries[0]->state = *state;
		st = batch_finish(&b, st);
	}
	return handle_leave(h, st);
}
