#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "host.h"

/* With oneDNN on OpenMP (DATAFLOW_HOST_POOL_OPENMP), kernels run on the calling stream
 * worker's OpenMP team, the same threads that run its matmuls, instead of on helper threads
 * of our own: two sets of threads on the same cores would compete, OpenMP's workers spinning
 * after each matmul while our helpers run the next kernel. DATAFLOW_HOST_POOL=threads keeps
 * the helper threads, and so does DATAFLOW_HOST_MATMUL=fallback (no OpenMP threads at all
 * then, as the sanitizer's leak check wants). */
#ifdef DATAFLOW_HOST_POOL_OPENMP
static int pool_wants_openmp(void)
{
	const char *pool = getenv("DATAFLOW_HOST_POOL"), *matmul = getenv("DATAFLOW_HOST_MATMUL");
	if (pool && *pool)
		return strcmp(pool, "threads") != 0;
	return !(matmul && strcmp(matmul, "fallback") == 0);
}
#endif

/* A fixed set of threads that run one kernel's parts at a time. Parts are handed out
 * through an atomic counter, so uneven parts balance themselves; the submitting stream
 * worker takes parts too, so a pool of N threads has N - 1 helpers. Helpers poll for the
 * next job, and the submitter for the last part, for a bounded time before sleeping
 * (host_spin_until); `generation`, `shutdown`, `parts_done` and `helpers_busy` change
 * under `lock`, atomically, so that pollers may read them without it. */
struct Compute_Pool {
	int num_threads;
	int use_openmp; /* run jobs on the caller's OpenMP team; no helpers */
	int num_helpers;
	pthread_t *helpers;
	pthread_mutex_t run_lock; /* one job at a time across streams */
	pthread_mutex_t lock;
	pthread_cond_t start, done;
	uint64_t generation;
	int shutdown;
	/* the current job */
	Dataflow_Host_Kernel kernel;
	void **args;
	int num_parts;
	atomic_int next_part;
	int parts_done;
	int helpers_busy;
};

static void run_parts(Compute_Pool *p)
{
	int finished = 0, part;
	while ((part = atomic_fetch_add(&p->next_part, 1)) < p->num_parts) {
		p->kernel(p->args, part, p->num_parts);
		finished++;
	}
	pthread_mutex_lock(&p->lock);
	__atomic_store_n(&p->parts_done, p->parts_done + finished, __ATOMIC_RELEASE);
	if (p->parts_done == p->num_parts)
		pthread_cond_broadcast(&p->done);
	pthread_mutex_unlock(&p->lock);
}

typedef struct {
	Compute_Pool *pool;
	uint64_t seen;
} Job_Watch;

static int new_job(void *arg)
{
	Job_Watch *w = arg;
	return __atomic_load_n(&w->pool->generation, __ATOMIC_ACQUIRE) != w->seen ||
	       __atomic_load_n(&w->pool->shutdown, __ATOMIC_ACQUIRE);
}

static int job_done(void *arg)
{
	Compute_Pool *p = arg;
	return __atomic_load_n(&p->parts_done, __ATOMIC_ACQUIRE) == p->num_parts &&
	       __atomic_load_n(&p->helpers_busy, __ATOMIC_ACQUIRE) == 0;
}

static void *helper_main(void *arg)
{
	Compute_Pool *p = arg;
	uint64_t seen = 0;
	pthread_mutex_lock(&p->lock);
	for (;;) {
		if (!p->shutdown && p->generation == seen) {
			Job_Watch w = {p, seen};
			pthread_mutex_unlock(&p->lock);
			host_spin_until(new_job, &w);
			pthread_mutex_lock(&p->lock);
		}
		while (!p->shutdown && p->generation == seen)
			pthread_cond_wait(&p->start, &p->lock);
		if (p->shutdown)
			break;
		seen = p->generation;
		__atomic_store_n(&p->helpers_busy, p->helpers_busy + 1, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&p->lock);
		run_parts(p);
		pthread_mutex_lock(&p->lock);
		/* the job's fields may only change once every helper has let go of them */
		__atomic_store_n(&p->helpers_busy, p->helpers_busy - 1, __ATOMIC_RELEASE);
		if (p->helpers_busy == 0)
			pthread_cond_broadcast(&p->done);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

Compute_Pool *compute_pool_create(int num_threads)
{
	Compute_Pool *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	pthread_mutex_init(&p->run_lock, NULL);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->start, NULL);
	pthread_cond_init(&p->done, NULL);
	p->num_threads = num_threads > 1 ? num_threads : 1;
	p->helpers = calloc((size_t)(num_threads > 1 ? num_threads - 1 : 1), sizeof(pthread_t));
	if (!p->helpers) {
		compute_pool_destroy(p);
		return NULL;
	}
#ifdef DATAFLOW_HOST_POOL_OPENMP
	p->use_openmp = p->num_threads > 1 && pool_wants_openmp();
	if (p->use_openmp)
		return p;
#endif
	for (int i = 0; i < num_threads - 1; i++) {
		if (pthread_create(&p->helpers[i], NULL, helper_main, p) != 0)
			break;
		p->num_helpers++;
	}
	return p;
}

void compute_pool_destroy(Compute_Pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	__atomic_store_n(&p->shutdown, 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&p->start);
	pthread_mutex_unlock(&p->lock);
	for (int i = 0; i < p->num_helpers; i++)
		pthread_join(p->helpers[i], NULL);
	pthread_cond_destroy(&p->start);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->run_lock);
	free(p->helpers);
	free(p);
}

#ifdef DATAFLOW_HOST_POOL_OPENMP
static void run_openmp(Compute_Pool *p, Dataflow_Host_Kernel kernel, void **args, int num_parts)
{
	atomic_int next = 0;
	int threads = num_parts < p->num_threads ? num_parts : p->num_threads;
	pthread_mutex_lock(&p->run_lock);
#pragma omp parallel num_threads(threads)
	{
		int part;
		while ((part = atomic_fetch_add(&next, 1)) < num_parts)
			kernel(args, part, num_parts);
	}
	pthread_mutex_unlock(&p->run_lock);
}
#endif

void compute_pool_run(Compute_Pool *p, Dataflow_Host_Kernel kernel, void **args, int num_parts)
{
#ifdef DATAFLOW_HOST_POOL_OPENMP
	if (p->use_openmp && num_parts > 1) {
		run_openmp(p, kernel, args, num_parts);
		return;
	}
#endif
	if (num_parts == 1 || p->num_helpers == 0) {
		for (int part = 0; part < num_parts; part++)
			kernel(args, part, num_parts);
		return;
	}
	pthread_mutex_lock(&p->run_lock);
	pthread_mutex_lock(&p->lock);
	while (p->helpers_busy > 0) /* a helper that woke late for the previous job */
		pthread_cond_wait(&p->done, &p->lock);
	p->kernel = kernel;
	p->args = args;
	p->num_parts = num_parts;
	__atomic_store_n(&p->parts_done, 0, __ATOMIC_RELEASE);
	atomic_store(&p->next_part, 0);
	__atomic_store_n(&p->generation, p->generation + 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&p->start);
	pthread_mutex_unlock(&p->lock);

	run_parts(p);

	host_spin_until(job_done, p);
	pthread_mutex_lock(&p->lock);
	while (p->parts_done < p->num_parts || p->helpers_busy > 0)
		pthread_cond_wait(&p->done, &p->lock);
	pthread_mutex_unlock(&p->lock);
	pthread_mutex_unlock(&p->run_lock);
}
