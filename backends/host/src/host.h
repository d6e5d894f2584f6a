#ifndef DATAFLOW_HOST_INTERNAL_H
#define DATAFLOW_HOST_INTERNAL_H

/* Private to the host backend: streams are worker threads with FIFO task queues, native
 * kernels run their parts on a shared compute pool, "device memory" is an arena of reserved
 * address space. */

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>

#include "block_list.h"
#include "dataflow/backend.h"

typedef struct Host_Handle Host_Handle;
typedef struct Host_Stream Host_Stream;

/* ---- arena (arena.c): the raw allocator, one reserved region carved best-fit into
 * 256-byte aligned blocks (the ledger in libdataflow does the accounting and the checks) ---- */
#define HOST_ARENA_ALIGN 256

typedef struct {
	pthread_mutex_t lock;
	uint8_t *base;	  /* 2 MiB aligned inside the mapping */
	void *mapping;	  /* what mmap returned, mapping_size bytes */
	uint64_t mapping_size;
	uint64_t capacity;
	Block_List free; /* offsets relative to base */
} Arena;

Dataflow_Status arena_init(Arena *arena, uint64_t capacity);
void arena_destroy(Arena *arena);
/* size: a multiple of HOST_ARENA_ALIGN. */
Dataflow_Status arena_alloc(Arena *arena, uint64_t size, void **ptr);
/* Returns a block from arena_alloc (its size as allocated) to the free list. */
void arena_release(Arena *arena, void *ptr, uint64_t size);

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

/* What a task does, by its kind. */
typedef union {
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
		Host_Stream *stream; /* of any host handle, kept alive by a reference */
		uint64_t value;
	} wait;
} Task_Work;

typedef struct Task {
	struct Task *next;
	Task_Kind kind;
	Task_Work u;
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
	/* the worker sleeps on `work` (new work, shutdown), syncs on `done` (completed work): apart, so
	 * that a finished task wakes no worker and new work no sync */
	pthread_cond_t work, done;
	Task *head, *tail;
	uint64_t submitted, completed;
	int inline_busy; /* a task runs on its submitter's thread (stream_enqueue) */
	int shutdown;
	/* First failure of asynchronous work, reported (and cleared) by the next sync. */
	Dataflow_Status error;
	char error_message[1024];
};

/* lock and conds are made here and destroyed by stream_free: waits queued on other handles may
 * read a stream after its handle is destroyed (host_unref). */
Dataflow_Status stream_start(Host_Stream *stream, Host_Handle *handle, int id);
/* Finishes the queued work and joins the worker. */
void stream_stop(Host_Stream *stream);
void stream_free(Host_Stream *stream);
void stream_enqueue(Host_Stream *stream, Task *task);
Dataflow_Status stream_sync(Host_Stream *stream);
/* Blocks until the stream's completed count reaches value. */
void stream_wait(Host_Stream *stream, uint64_t value);
/* 1 if this thread is the worker of one of h's streams. */
int host_on_worker(Dataflow_Handle *h);
Task *task_new(Task_Kind kind);
/* submit.c: queues a task of this kind doing work (what names the call in the out-of-memory error). */
Dataflow_Status host_enqueue_work(Dataflow_Handle *h, int stream_id, Task_Kind kind, Task_Work work, const char *what);

/* ---- the handle's context ---- */
typedef struct {
	Dataflow_Host_Kernel kernel;
	Dataflow_Launch_Fn launch; /* may be NULL: one part */
} Host_Op;

struct Host_Handle {
	Dataflow_Handle *handle;
	int refs; /* the handle while open, plus one per queued wait on one of its streams */
	int num_streams;
	Host_Stream streams[DATAFLOW_MAX_STREAMS];
	Compute_Pool *pool;
	int num_threads;
	Arena arena;
	double transfer_bytes_per_sec;
	char ops_library_path[4096];
};

static inline Host_Handle *host_of(Dataflow_Handle *h)
{
	return h->ctx;
}

void host_ref(Host_Handle *h);
/* Frees the context with the last reference. */
void host_unref(Host_Handle *h);

/* interface entries: register.c, submit.c; stream.c (events are counts of tasks queued (recorded)
 * and run (done)); memory.c */
DATAFLOW_BACKEND_DECLARE_ENTRIES(host);

/* transfer.c; inbound and outbound transfers are one copy task */
Dataflow_Status host_submit_copy(Dataflow_Handle *h, int stream_id, void *dst, const void *src, uint64_t size);
Dataflow_Status host_submit_peer_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, Dataflow_Handle *dst_owner,
					  const void *dev_src, Dataflow_Handle *src_owner, uint64_t size);
/* Runs a copy task: memcpy, paced to the handle's transfer bandwidth when set. */
void host_run_copy(Host_Handle *h, void *dst, const void *src, uint64_t size);

#endif
