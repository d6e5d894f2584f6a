#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataflow/handle.h"

typedef Dataflow_Status (*Backend_Create_Fn)(int device_index, const Dataflow_Handle_Config *config,
					      Dataflow_Handle **handle);

static char library_dir[PATH_MAX];
static pthread_once_t library_dir_once = PTHREAD_ONCE_INIT;

static void find_library_dir(void)
{
	Dl_info info;
	if (dladdr((void *)&dataflow_handle_create, &info) && info.dli_fname) {
		snprintf(library_dir, sizeof(library_dir), "%s", info.dli_fname);
		char *slash = strrchr(library_dir, '/');
		if (slash)
			*slash = '\0';
		else
			library_dir[0] = '\0';
	}
}

const char *dataflow_library_dir(void)
{
	pthread_once(&library_dir_once, find_library_dir);
	return library_dir;
}

/* Splits "name[:index]" into a backend name and a device index. */
static Dataflow_Status parse_backend(const char *spec, char *name, size_t name_size, int *device_index)
{
	const char *colon = strchr(spec, ':');
	size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
	if (len == 0 || len >= name_size)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "backend: expected \"host\", \"cuda\" or \"cuda:N\", got \"%s\"", spec);
	for (size_t i = 0; i < len; i++)
		if (!((spec[i] >= 'a' && spec[i] <= 'z') || (spec[i] >= '0' && spec[i] <= '9') || spec[i] == '_'))
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "backend: name must be lowercase [a-z0-9_], got \"%s\"", spec);
	memcpy(name, spec, len);
	name[len] = '\0';
	*device_index = 0;
	if (colon) {
		char *end = NULL;
		long idx = strtol(colon + 1, &end, 10);
		if (!colon[1] || *end || idx < 0 || idx > INT_MAX)
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "backend: device index in \"%s\" must be a non-negative integer",
						  spec);
		*device_index = (int)idx;
	}
	return DATAFLOW_OK;
}

static Dataflow_Status check_config(const Dataflow_Handle_Config *c)
{
	if (c->num_streams < 0 || c->num_streams > DATAFLOW_MAX_STREAMS)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "handle config: num_streams must be 0 (default) or 1..%d, got %d",
					  DATAFLOW_MAX_STREAMS, c->num_streams);
	if (c->num_threads < 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "handle config: num_threads must be >= 0 (0 = all cores), got %d",
					  c->num_threads);
	if (!(c->transfer_bytes_per_sec >= 0))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "handle config: transfer_bytes_per_sec must be >= 0 (0 = unthrottled), got %g",
					  c->transfer_bytes_per_sec);
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_handle_create(const char *backend, const Dataflow_Handle_Config *config,
				       Dataflow_Handle **handle)
{
	if (!handle)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "handle create: output pointer is NULL");
	*handle = NULL;
	if (!backend)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "handle create: backend name is NULL");
	Dataflow_Handle_Config defaults = {0};
	if (!config)
		config = &defaults;
	char name[32];
	int device_index;
	Dataflow_Status st = parse_backend(backend, name, sizeof(name), &device_index);
	if (st == DATAFLOW_OK)
		st = check_config(config);
	if (st != DATAFLOW_OK)
		return st;

	/* The backend library sits next to libdataflow; fall back to the loader's search path. */
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/libdataflow_%s.so", dataflow_library_dir(), name);
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		char first_error[512];
		snprintf(first_error, sizeof(first_error), "%s", dlerror());
		snprintf(path, sizeof(path), "libdataflow_%s.so", name);
		lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!lib)
			return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED,
						  "backend \"%s\": cannot load its library (%s)", name, first_error);
	}
	char symbol[96];
	snprintf(symbol, sizeof(symbol), "dataflow_%s_handle_create", name);
	Backend_Create_Fn create = (Backend_Create_Fn)dlsym(lib, symbol);
	if (!create)
		return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED, "backend \"%s\": library %s lacks symbol %s", name,
					  path, symbol);
	st = create(device_index, config, handle);
	if (st != DATAFLOW_OK)
		return st;
	if ((*handle)->version != DATAFLOW_HANDLE_VERSION) {
		int got = (*handle)->version;
		(*handle)->destroy(*handle);
		*handle = NULL;
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "backend \"%s\": built for handle version %d, libdataflow expects %d", name, got,
					  DATAFLOW_HANDLE_VERSION);
	}
	return DATAFLOW_OK;
}

void dataflow_handle_destroy(Dataflow_Handle *handle)
{
	if (handle)
		handle->destroy(handle);
}
