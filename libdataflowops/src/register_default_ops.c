/* Registers every variant of the catalogue's ops with the symbol names the backend's default
 * ops library provides (dataflow/op_catalogue.h) and the op's signature, which the dispatch
 * layer compiles once and checks at every submission; natives and externals in one call each. A
 * backend may provide a subset of the default ops: an op whose launch (native) or init
 * (external) symbol its library lacks is left out; a provided op must then provide every
 * variant, or registration fails. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "op_catalogue_internal.h"

#define SYMBOL_LEN 160

typedef struct {
	int count;
	Op_Skeleton *skeletons;
	char (*names)[2][SYMBOL_LEN]; /* kernel or function, launch or init */
	const char **first, **second;
	const char **signatures;
} Variant_List;

static int list_alloc(Variant_List *l, int n)
{
	l->skeletons = malloc((size_t)n * sizeof(*l->skeletons));
	l->names = malloc((size_t)n * sizeof(*l->names));
	l->first = malloc((size_t)n * sizeof(*l->first));
	l->second = malloc((size_t)n * sizeof(*l->second));
	l->signatures = malloc((size_t)n * sizeof(*l->signatures));
	return l->skeletons && l->names && l->first && l->second && l->signatures;
}

static void list_free(Variant_List *l)
{
	free(l->skeletons);
	free(l->names);
	free(l->first);
	free(l->second);
	free(l->signatures);
}

static void list_add(Variant_List *l, const Op_Skeleton *s, const char *first, const char *second,
		     const char *signature)
{
	int i = l->count++;
	l->skeletons[i] = *s;
	l->signatures[i] = signature;
	snprintf(l->names[i][0], SYMBOL_LEN, "%s", first);
	snprintf(l->names[i][1], SYMBOL_LEN, "%s", second);
	l->first[i] = l->names[i][0];
	l->second[i] = l->names[i][1];
}

/* Adds op's variants if lib exports its launch (native) or init (external) symbol. */
static Dataflow_Status add_op(Variant_List *nat, Variant_List *ext, const Dataflow_Op_Info *op, const char *backend,
			      void *lib)
{
	int external = op->kind == DATAFLOW_OP_EXTERNAL;
	char first[SYMBOL_LEN], second[SYMBOL_LEN];
	snprintf(second, sizeof(second), "dataflow_%s_%s_%s", backend, op->name, external ? "init" : "launch");
	if (!dlsym(lib, second))
		return DATAFLOW_OK;
	for (int v = 0; v < op->num_variants; v++) {
		const Op_Skeleton *s = ops_variant_skeleton(op, v);
		if (!s)
			return dataflow_last_status();
		if (external)
			snprintf(first, sizeof(first), "dataflow_%s_%s", backend, op->name);
		else
			snprintf(first, sizeof(first), "dataflow_%s_%s_%s", backend, op->name, op->variant_symbols[v]);
		list_add(external ? ext : nat, s, first, second, op->signature);
	}
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_register_default_ops(Dataflow_Handle *handle)
{
	if (!handle)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "register_default_ops: handle is NULL");
	const char *library = dataflow_handle_default_ops_library(handle);
	const char *backend = dataflow_handle_backend_name(handle);
	if (!library)
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "register_default_ops: backend '%s' names no default ops library", backend);
	void *lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED, "register_default_ops: cannot load %s: %s", library,
					  dlerror());
	int total = 0;
	for (int i = 0; i < ops_catalogue_size; i++)
		total += ops_catalogue[i].num_variants;
	Variant_List nat = {0}, ext = {0};
	Dataflow_Status st = DATAFLOW_OK;
	if (!list_alloc(&nat, total) || !list_alloc(&ext, total))
		st = dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "register_default_ops: no memory");
	for (int i = 0; i < ops_catalogue_size && st == DATAFLOW_OK; i++)
		st = add_op(&nat, &ext, &ops_catalogue[i], backend, lib);
	dlclose(lib);
	if (st == DATAFLOW_OK && nat.count)
		st = dataflow_register_native_code(handle, library, NULL, nat.count, nat.skeletons, nat.first, nat.second,
						  NULL, nat.signatures, 0);
	if (st == DATAFLOW_OK && ext.count)
		st = dataflow_register_external_code(handle, library, ext.count, ext.skeletons, ext.first, ext.second,
						    ext.signatures, 0);
	list_free(&nat);
	list_free(&ext);
	return st;
}
