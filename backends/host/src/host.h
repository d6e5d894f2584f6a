#ifndef DATAFLOW_HOST_INTERNAL_H
#define DATAFLOW_HOST_INTERNAL_H

/* Private to the host backend: streams are worker threads with FIFO task queues, native
 * kernels run their parts on a shared compute pool, "device memory" is an accounted arena. */

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>

#include "block_list.h"
#include "dataflow/backend.h"

typedef struct Host_Handle Host_Handle;
typedef struct Host_Stream Host_Stream;

/* ---- arena (arena.c): one reserved region, best-fit blocks, 256-byte aligned ---- */
#define HOST_ARENA_ALIGN 256

typedef struct {
	pthread_mutex_t lock;
	uint8_t *base;	  /* 2 MiB aligned inside the mapping */
	void *mapping;	  /* what mmap returned, mapping_size bytes */
	uint64_t mapping_size;
	uint64_t capacity, in_use;
	Block_List live, free; /* offsets relative to base */
} Arena;

Dataflow_Status arena_init(Arena *arena, uint64_t capacity);
void arena_destroy(Arena *arena);
Dataflow_Status arena_alloc(Arena *arena, uint64_t size, void **ptr);
/* Marks a live allocation freed: no longer valid for ops or transfers, not yet reusable. */
Dataflow_Status arena_retire(Arena *arena, void *ptr);
/* Returns a retired allocation's block to the free list. */
void arena_release(Arena *arena, void *ptr);
/* 1 if [ptr, ptr + size) lies in one live allocation; else 0 with a reason in why. */
int arena_contains(Arena *arena, const void *ptr, uint64_t size, char *why, size_t why_size);

/* ---- bounded spinning before sleeping ----
 * A futex wake-up costs 5-30 us between a waker and a sleeper (more on a loaded machine),
 * which dominates small ops. Threads that expect work soon (a stream worker after a task,
 * a pool helper after a job, a sync on a short queue) first poll for up to HOST_SPIN_NS,
 * pausing for the first microseconds and then yielding the CPU (so a spinner never keeps a
 * thread with real work off a busy core), and only then sleep on their condition variable.
 * Idle threads therefore burn at most HOST_SPIN_NS of CPU before they sleep. */
#define HOST_SPIN_NS 50000
#define HOST_SPIN_PAUSE_NS 2000

static inline uint64_t host_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void host_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Polls ready(arg) until it returns nonzero (returns 1) or HOST_SPIN_NS pass (returns 0). */
static inline int host_spin_until(int (*ready)(void *), void *arg)
{
	if (ready(arg))
		return 1;
	uint64_t start = host_now_ns();
	for (;;) {
		for (int i = 0; i < 16; i++) {
			host_cpu_relax();
			if (ready(arg))
				return 1;
		}
		uint64_t spent = host_now_ns() - start;
		if (spent > HOST_SPIN_NS)
			return 0;
		if (spent > HOST_SPIN_PAUSE_NS)
			sched_yield();
	}
}

/* ---- compute pool (compute_pool.c): runs a kernel's parts on num_threads threads ---- */
typedef struct Compute_Pool Compute_Pool;
Compute_Pool *compute_pool_create(int num_threads);
void compute_pool_destroy(Compute_Pool *pool);
/* Runs kernel(args, part, num_parts) for every part; the caller works too. One job at a
 * time: concurrent callers (other streams) queue on the pool. */
void compute_pool_run(Compute_Pool *pool, Dataflow_Host_Kernel kernel, void **args, int num_parts);

/* ---- tasks and streams (stream.c) ---- */
typedef enum { TASK_KERNEL, TASK_EXTERNAL, TASK_HOST_FN, TASK_COPY, TASK_MEMSET, TASK_WAIT } Task_Kind;

typedef struct Task {
	struct Task *next;
	Task_Kind kind;
	union {
		struct {
			Dataflow_Host_Kernel kernel;
			int num_parts;
		} kernel;
		struct {
			Dataflow_External_Fn func;
			void *state;
		} external;
		struct {
			Dataflow_Host_Fn func;
			void *arg;
		} host_fn;
		struct {
			void *dst;
			const void *src;
			uint64_t size;
		} copy;
		struct {
			void *dst;
			uint64_t size;
			uint8_t value;
		} memset;
		struct {
			Host_Stream *stream;
			uint64_t value;
		} wait;
	} u;
	/* Ops are copied at submission: the caller's Op and argument values may be gone by
	 * the time the task runs. */
	Op op;
	uint64_t arg_values[DATAFLOW_MAX_OP_ARGS];
} Task;

struct Host_Stream {
	Host_Handle *handle;
	int id;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* new work, completed work and shutdown */
	Task *head, *tail;
	uint64_t submitted, completed;
	int shutdown;
	/* First failure of asynchronous work, reported (and cleared) by the next sync. */
	Dataflow_Status error;
	char error_message[1024];
};

Dataflow_Status stream_start(Host_Stream *stream, Host_Handle *handle, int id);
void stream_stop(Host_Stream *stream);
void stream_enqueue(Host_Stream *stream, Task *task);
Dataflow_Status stream_sync(Host_Stream *stream);
/* The stream whose worker is running on this thread, or NULL. */
Host_Stream *stream_current(void);
Task *task_new(Task_Kind kind);

/* ---- the handle ---- */
typedef struct {
	Dataflow_Op_Record base;          /* first: skeleton, state, external (dataflow/backend.h) */
	Dataflow_Host_Kernel kernel;      /* native */
	Dataflow_Launch_Fn launch;        /* native, may be NULL: one part */
} Host_Op;

typedef struct {
	const uint8_t *ptr;
	uint64_t size;
} Host_Range;

/* A freed block and, per stream, how much work was queued when it was freed. */
typedef struct {
	void *ptr;
	uint64_t submitted[DATAFLOW_MAX_STREAMS];
} Host_Pending_Free;

struct Host_Handle {
	Dataflow_Handle base;
	Host_Stream streams[DATAFLOW_MAX_STREAMS];
	Compute_Pool *pool;
	Arena arena;
	double transfer_bytes_per_sec;
	Dataflow_Libraries libraries; /* op code loaded by registration */
	pthread_mutex_t lock;         /* guards the lists below */
	Host_Range *host_ranges; /* host memory made accessible with enable_access_to_host_mem */
	int num_host_ranges;
	Host_Handle **peers;
	int num_peers;
	Host_Pending_Free *pending_frees;
	int num_pending_frees;
	char ops_library_path[4096];
};

extern const char host_backend_tag[];

static inline Host_Handle *host_of(Dataflow_Handle *h)
{
	return (Host_Handle *)h;
}

/* OK if ptr..ptr+size is device memory of h, of an enabled peer (allow_peer), or host
 * memory made accessible to h; `what` names the argument in the error. */
Dataflow_Status host_check_device_range(Host_Handle *h, const void *ptr, uint64_t size, int allow_peer,
					const char *what);

/* vtable entries, by file */
Dataflow_Status host_register_native_code(Dataflow_Handle *h, const char *code_path, const char *launch_library_path,
					  int num_ops, const Op_Skeleton *skeletons, const char *const *kernel_symbols,
					  const char *const *launch_symbols, const char *const *init_symbols,
					  int flags);
Dataflow_Status host_register_external_code(Dataflow_Handle *h, const char *library_path, int num_ops,
					    const Op_Skeleton *skeletons, const char *const *func_symbols,
					    const char *const *init_symbols, int flags);
Dataflow_Status host_register_external_func(Dataflow_Handle *h, const Op_Skeleton *skeleton,
					    Dataflow_External_Fn func, const Dataflow_Op_State *state, int flags);

Dataflow_Status host_submit_op(Dataflow_Handle *h, const Op *op, int stream_id);
Dataflow_Status host_submit_host_op(Dataflow_Handle *h, Dataflow_Host_Fn func, void *arg, int stream_id);

Dataflow_Status host_get_stream_state(Dataflow_Handle *h, int stream_id, Dataflow_Stream_State *state);
Dataflow_Status host_submit_dependency(Dataflow_Handle *h, int stream_id, const Dataflow_Stream_State *state);
Dataflow_Status host_sync_stream(Dataflow_Handle *h, int stream_id);
Dataflow_Status host_sync_handle(Dataflow_Handle *h);

Dataflow_Status host_alloc_mem(Dataflow_Handle *h, uint64_t size, void **ptr);
Dataflow_Status host_free_mem(Dataflow_Handle *h, void *ptr);
Dataflow_Status host_set_mem(Dataflow_Handle *h, int stream_id, void *ptr, uint8_t value, uint64_t size);
Dataflow_Status host_enable_access_to_host_mem(Dataflow_Handle *h, void *ptr, uint64_t size, unsigned int flags);
Dataflow_Status host_disable_access_to_host_mem(Dataflow_Handle *h, void *ptr);
Dataflow_Status host_enable_access_to_peer_mem(Dataflow_Handle *h, Dataflow_Handle *peer);
Dataflow_Status host_disable_access_to_peer_mem(Dataflow_Handle *h, Dataflow_Handle *peer);
Dataflow_Status host_query_mem(Dataflow_Handle *h, uint64_t *capacity, uint64_t *in_use);
Dataflow_Status host_check_mem_range(Dataflow_Handle *h, const void *ptr, uint64_t size, const char *what);

Dataflow_Status host_submit_inbound_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, const void *host_src,
					     uint64_t size);
Dataflow_Status host_submit_outbound_transfer(Dataflow_Handle *h, int stream_id, void *host_dst, const void *dev_src,
					      uint64_t size);
Dataflow_Status host_submit_peer_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, const void *dev_src,
					  uint64_t size);
/* Runs a copy task: memcpy, paced to the handle's transfer bandwidth when set. */
void host_run_copy(Host_Handle *h, void *dst, const void *src, uint64_t size);

#endif
