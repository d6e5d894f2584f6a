#ifndef DATAFLOW_C_TEST_H
#define DATAFLOW_C_TEST_H

/* Shared by the C tests: CHECK aborts the test on a failed call, EXPECT_ERROR checks that a
 * call fails with a status and a message containing a substring, open_host makes a host
 * handle, a Gate holds a stream's work back until it is opened. */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dataflow/dataflow.h"

static inline void check_status(Dataflow_Status status, const char *file, int line, const char *call)
{
	if (status == DATAFLOW_OK)
		return;
	fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, call, dataflow_last_error());
	exit(1);
}

#define CHECK(call) check_status((call), __FILE__, __LINE__, #call)

/* A soft check: a failed EXPECT_THAT prints the condition and a printf-style note and counts the
 * failure; the test ends with `return *c_test_failures() != 0;`. */
static inline int *c_test_failures(void)
{
	static int failures;
	return &failures;
}

#define EXPECT_THAT(cond, ...)                                                                               \
	do {                                                                                                 \
		if (!(cond)) {                                                                               \
			fprintf(stderr, "%s:%d: expected %s: ", __FILE__, __LINE__, #cond);                  \
			fprintf(stderr, __VA_ARGS__);                                                        \
			fprintf(stderr, "\n");                                                               \
			(*c_test_failures())++;                                                              \
		}                                                                                            \
	} while (0)

#define EXPECT(cond)                                                                                         \
	do {                                                                                                 \
		if (!(cond)) {                                                                               \
			fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                  \
			exit(1);                                                                             \
		}                                                                                            \
	} while (0)

/* status and message of a failed call, kept for checks made later (e.g. on another thread) */
typedef struct {
	Dataflow_Status status;
	char message[1024];
} Outcome;

static inline void outcome_keep(Outcome *o, Dataflow_Status st)
{
	o->status = st;
	snprintf(o->message, sizeof(o->message), "%s", st == DATAFLOW_OK ? "" : dataflow_last_error());
}

static inline void expect_outcome(const char *file, int line, const Outcome *o, Dataflow_Status want, const char *part)
{
	if (o->status != want || !strstr(o->message, part)) {
		fprintf(stderr, "%s:%d: expected %s with \"%s\", got %s: \"%s\"\n", file, line, dataflow_status_name(want),
			part, dataflow_status_name(o->status), o->message);
		exit(1);
	}
}

#define EXPECT_OUTCOME(o, want, part) expect_outcome(__FILE__, __LINE__, (o), (want), (part))

#define EXPECT_ERROR(call, want, part)                                                                       \
	do {                                                                                                 \
		Outcome o_;                                                                                  \
		outcome_keep(&o_, (call));                                                                   \
		expect_outcome(__FILE__, __LINE__, &o_, (want), (part));                                     \
	} while (0)

static inline Dataflow_Handle *open_host(int streams, uint64_t memory, const char *options)
{
	Dataflow_Handle_Config config = {.num_streams = streams, .device_memory_bytes = memory, .options = options};
	Dataflow_Handle *h;
	CHECK(dataflow_handle_create("host", &config, &h));
	return h;
}

static inline void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* A host op that blocks its stream until the gate opens, so that work queued behind it is
 * pending: Gate g = GATE_INIT, then dataflow_submit_host_op(h, gate_wait, &g, stream). */
typedef struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int open;
} Gate;
#define GATE_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0}

static inline void gate_wait(void *arg)
{
	Gate *g = arg;
	pthread_mutex_lock(&g->lock);
	while (!g->open)
		pthread_cond_wait(&g->cond, &g->lock);
	pthread_mutex_unlock(&g->lock);
}

static inline void gate_open(Gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->open = 1;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

/* A thread body: opens the gate after 100 ms. */
static inline void *gate_open_later(void *arg)
{
	sleep_ms(100);
	gate_open(arg);
	return NULL;
}

#endif
