#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "handle_internal.h"

/* A handle's life: created here around the backend's init; open while in the registry (stream
 * states and peer links find handles there by id); destroyed in steps so that nothing else is
 * using it when its parts go: refuse calls, wait for the calls running, unlink it from its
 * peers (and wait for the work they queued, which may touch its memory), wait for its own
 * queued work, then release ops, memory and the backend. */

/* The handles whose op code runs on this thread, innermost last (deeper nesting is counted,
 * not kept). */
#define OP_CODE_DEPTH 8
static _Thread_local const Dataflow_Handle *op_code_handles[OP_CODE_DEPTH];
static _Thread_local int op_code_depth;

void op_code_begin(Dataflow_Handle *h)
{
	if (op_code_depth < OP_CODE_DEPTH)
		op_code_handles[op_code_depth] = h;
	op_code_depth++;
}

void op_code_end(void)
{
	op_code_depth--;
}

int in_op_code(const Dataflow_Handle *h)
{
	for (int i = 0; i < op_code_depth && i < OP_CODE_DEPTH; i++)
		if (op_code_handles[i] == h)
			return 1;
	return 0;
}

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

/* ---- the registry of open handles ---- */

static pthread_mutex_t registry_mutex = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static Dataflow_Handle **open_handles;
static int num_open, cap_open;
static uint64_t next_id = 1;

void registry_lock(void)
{
	pthread_mutex_lock(&registry_mutex);
}

void registry_unlock(void)
{
	pthread_mutex_unlock(&registry_mutex);
}

Dataflow_Handle *registry_find(uint64_t id)
{
	for (int i = 0; i < num_open; i++)
		if (open_handles[i]->id == id)
			return open_handles[i];
	return NULL;
}

int registry_has(const Dataflow_Handle *h)
{
	for (int i = 0; i < num_open; i++)
		if (open_handles[i] == h)
			return 1;
	return 0;
}

Dataflow_Status handle_enter(Dataflow_Handle *h, const char *what)
{
	if (!h)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: handle is NULL", what);
	registry_lock(); /* destroy marks the handle closing under this lock, so an open one stays alive */
	int found = registry_has(h), open = found && __atomic_load_n(&h->state, __ATOMIC_SEQ_CST) == HANDLE_OPEN;
	if (open)
		__atomic_fetch_add(&h->active_calls, 1, __ATOMIC_SEQ_CST);
	registry_unlock();
	if (!found)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: not an open handle (destroyed or being destroyed, or never made by "
					  "dataflow_handle_create)", what);
	if (!open)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: handle is closed (dataflow_handle_destroy was called)", what);
	return DATAFLOW_OK;
}

static int registry_add(Dataflow_Handle *h)
{
	registry_lock();
	if (num_open == cap_open) {
		int cap = cap_open ? 2 * cap_open : 16;
		Dataflow_Handle **grown = realloc(open_handles, (size_t)cap * sizeof(*grown));
		if (!grown) {
			registry_unlock();
			return 0;
		}
		open_handles = grown;
		cap_open = cap;
	}
	h->id = next_id++;
	open_handles[num_open++] = h;
	registry_unlock();
	return 1;
}

void handle_wait_idle(Dataflow_Handle *h)
{
	uint64_t events[DATAFLOW_MAX_STREAMS];
	int recorded[DATAFLOW_MAX_STREAMS];
	for (int s = 0; s < h->num_streams; s++)
		recorded[s] = h->iface->record_event(h, s, &events[s]) == DATAFLOW_OK;
	for (int s = 0; s < h->num_streams; s++)
		if (recorded[s])
			h->iface->wait_event(h, s, events[s]);
}

/* ---- create ---- */

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

static int compare_names(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "cuda, host, vulkan": the backends whose libraries (libdataflow_<name>.so, not the kernels'
 * libdataflow_<name>_ops.so) sit in `dir`. */
static void list_backends(const char *dir, char *out, size_t size)
{
	char names[16][64];
	const char *sorted[16];
	int n = 0;
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && n < 16 && (e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (strncmp(e->d_name, "libdataflow_", 12) != 0 || len < 16 || strcmp(e->d_name + len - 3, ".so") != 0 ||
		    (len >= 19 && strcmp(e->d_name + len - 7, "_ops.so") == 0) || len - 15 >= sizeof(names[0]))
			continue;
		snprintf(names[n], sizeof(names[n]), "%.*s", (int)(len - 15), e->d_name + 12);
		sorted[n] = names[n];
		n++;
	}
	if (d)
		closedir(d);
	qsort(sorted, (size_t)n, sizeof(sorted[0]), compare_names);
	out[0] = '\0';
	for (int i = 0; i < n; i++)
		snprintf(out + strlen(out), size - strlen(out), "%s%s", i ? ", " : "", sorted[i]);
	if (n == 0)
		snprintf(out, size, "none");
}

/* The backend library sits next to libdataflow; else the loader's search path. */
static Dataflow_Status load_backend(const char *name, Dataflow_Backend_Init_Fn *init)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/libdataflow_%s.so", dataflow_library_dir(), name);
	int beside = access(path, F_OK) == 0;
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		char first_error[512];
		snprintf(first_error, sizeof(first_error), "%s", dlerror());
		snprintf(path, sizeof(path), "libdataflow_%s.so", name);
		lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!lib && !beside) { /* no such backend here: a typo, or one this build lacks */
			char known[256];
			list_backends(dataflow_library_dir(), known, sizeof(known));
			return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED,
						  "backend \"%s\": no such backend in this build; available: %s", name,
						  known);
		}
		if (!lib)
			return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED,
						  "backend \"%s\": cannot load its library (%s)", name, first_error);
	}
	char symbol[96];
	snprintf(symbol, sizeof(symbol), "dataflow_%s_backend_init", name);
	*init = (Dataflow_Backend_Init_Fn)dlsym(lib, symbol);
	if (!*init)
		return dataflow_set_error(DATAFLOW_ERR_LOAD_FAILED, "backend \"%s\": library %s lacks symbol %s", name,
					  path, symbol);
	return DATAFLOW_OK;
}

/* Releases what create made; the backend's part only if its init succeeded. */
static void handle_free(Dataflow_Handle *h)
{
	dataflow_op_table_destroy(h->op_table);
	ledger_destroy(h);
	if (h->iface)
		h->iface->destroy(h);
	for (int i = 0; i < h->libraries.count; i++)
		dlclose(h->libraries.handles[i]);
	free(h->libraries.handles);
	free((char *)h->backend_name);
	free(h);
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
	Dataflow_Backend_Init_Fn init = NULL;
	Dataflow_Status st = parse_backend(backend, name, sizeof(name), &device_index);
	if (st == DATAFLOW_OK && (config->num_streams < 0 || config->num_streams > DATAFLOW_MAX_STREAMS))
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"handle config: num_streams must be 0 (default) or 1..%d, got %d",
					DATAFLOW_MAX_STREAMS, config->num_streams);
	if (st == DATAFLOW_OK)
		st = load_backend(name, &init);
	if (st != DATAFLOW_OK)
		return st;

	Dataflow_Handle *h = calloc(1, sizeof(*h));
	if (!h || !(h->backend_name = strdup(name)) || !(h->op_table = dataflow_op_table_create())) {
		if (h)
			free((char *)h->backend_name);
		free(h);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "handle create: no memory for the handle");
	}
	h->device_index = device_index;
	h->num_streams = config->num_streams > 0 ? config->num_streams : 4;
	Dataflow_Backend_Params params = {device_index, h->num_streams, config->stream_priorities,
					  config->device_memory_bytes, config->options};
	uint64_t capacity = 0;
	st = init(h, &params, &capacity);
	if (st == DATAFLOW_OK && h->iface->version != DATAFLOW_BACKEND_INTERFACE_VERSION)
		st = dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					"backend \"%s\": built for backend interface version %d, libdataflow has %d", name,
					h->iface->version, DATAFLOW_BACKEND_INTERFACE_VERSION);
	if (st == DATAFLOW_OK)
		st = ledger_create(h, capacity);
	if (st == DATAFLOW_OK && !registry_add(h))
		st = dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "handle create: no memory for the handle registry");
	if (st != DATAFLOW_OK) {
		char message[1024];
		snprintf(message, sizeof(message), "%s", dataflow_last_error());
		handle_free(h);
		return dataflow_set_error(st, "%s", message);
	}
	__atomic_store_n(&h->state, HANDLE_OPEN, __ATOMIC_SEQ_CST);
	*handle = h;
	return DATAFLOW_OK;
}

/* ---- destroy ---- */

static void wait_until_zero(int *counter)
{
	while (__atomic_load_n(counter, __ATOMIC_ACQUIRE) > 0)
		sched_yield();
}

/* Takes h out of the registry and out of every peer link, both ways. Returns the handles that
 * had access to h's memory, pinned (they stay alive until unpinned), for the caller to wait
 * for the work they queued. */
static int unlink_handle(Dataflow_Handle *h, Dataflow_Handle ***linked)
{
	int n = 0;
	registry_lock();
	for (int i = 0; i < num_open; i++)
		if (open_handles[i] == h)
			open_handles[i--] = open_handles[--num_open];
	Dataflow_Handle *peers[LEDGER_MAX_PEERS];
	int num_peers = ledger_peers(h, peers, LEDGER_MAX_PEERS);
	for (int i = 0; i < num_peers; i++) {
		ledger_remove_peer(h, peers[i]);
		if (h->iface->disable_peer)
			h->iface->disable_peer(h, peers[i]);
	}
	*linked = calloc((size_t)num_open + 1, sizeof(**linked));
	for (int i = 0; i < num_open; i++) {
		Dataflow_Handle *x = open_handles[i];
		if (!ledger_remove_peer(x, h))
			continue;
		if (x->iface->disable_peer)
			x->iface->disable_peer(x, h);
		if (*linked) {
			__atomic_fetch_add(&x->pins, 1, __ATOMIC_ACQ_REL);
			(*linked)[n++] = x;
		}
	}
	registry_unlock();
	return n;
}

Dataflow_Status dataflow_handle_destroy(Dataflow_Handle *h)
{
	if (!h)
		return DATAFLOW_OK;
	registry_lock(); /* h is read only once found registered, and marked closing under the lock */
	Dataflow_Status st = DATAFLOW_OK;
	int open = HANDLE_OPEN;
	if (!registry_has(h))
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "handle destroy: not an open handle (destroyed "
					"already, or never made by dataflow_handle_create)");
	else if (in_op_code(h))
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"handle destroy: called from inside a call on this handle (an op's launch, init "
					"or external function), which it would wait for");
	else if (h->iface->on_worker(h))
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"handle destroy: called from work queued on this handle (a host op or external "
					"op), which it would wait for; destroy it from another thread");
	else if (!__atomic_compare_exchange_n(&h->state, &open, HANDLE_CLOSING, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "handle destroy: the handle is being destroyed");
	registry_unlock();
	if (st != DATAFLOW_OK)
		return st;
	wait_until_zero(&h->active_calls);

	Dataflow_Handle **linked;
	int n = unlink_handle(h, &linked);
	for (int i = 0; i < n; i++) {
		if (!linked[i]->iface->on_worker(linked[i])) /* its worker cannot wait for itself */
			handle_wait_idle(linked[i]);
		__atomic_fetch_sub(&linked[i]->pins, 1, __ATOMIC_ACQ_REL);
	}
	free(linked);
	wait_until_zero(&h->pins);
	handle_wait_idle(h);
	handle_free(h);
	return DATAFLOW_OK;
}
