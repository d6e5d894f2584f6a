#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "dataflow/backend.h"

/* Registration is rare, so one lock serves every handle's library set. */
static pthread_mutex_t libraries_lock = PTHREAD_MUTEX_INITIALIZER;

Dataflow_Status dataflow_libraries_open(Dataflow_Handle *h, const char *path, void **lib)
{
	if (!path)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "register: library path is NULL");
	*lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!*lib)
		return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED, "register: cannot load %s: %s", path, dlerror());
	Dataflow_Libraries *libs = &h->libraries;
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
