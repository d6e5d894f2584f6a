#include <errno.h>
#include <string.h>
#include <time.h>

#include "host.h"

/* Transfers are memcpy tasks on the named stream. With a bandwidth set, the copy is split
 * into chunks and each chunk waits until `bytes so far / bandwidth` has elapsed, so a
 * transfer of B bytes takes at least B / bandwidth seconds, as over a real link. */

#define CHUNK_BYTES (1u << 20)

static double now_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_until(double t)
{
	struct timespec ts;
	ts.tv_sec = (time_t)t;
	ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

void host_run_copy(Host_Handle *h, void *dst, const void *src, uint64_t size)
{
	double bw = h->transfer_bytes_per_sec;
	if (bw <= 0) {
		memmove(dst, src, size);
		return;
	}
	double start = now_seconds();
	for (uint64_t done = 0; done < size;) {
		uint64_t n = size - done < CHUNK_BYTES ? size - done : CHUNK_BYTES;
		memmove((uint8_t *)dst + done, (const uint8_t *)src + done, n);
		done += n;
		sleep_until(start + (double)done / bw);
	}
}

Dataflow_Status host_submit_copy(Dataflow_Handle *h, int stream_id, void *dst, const void *src, uint64_t size)
{
	return host_enqueue_work(h, stream_id, TASK_COPY, (Task_Work){.copy = {.dst = dst, .src = src, .size = size}},
				 "transfer");
}

/* Every host handle's memory is this process's: a peer copy is a plain copy. */
Dataflow_Status host_submit_peer_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, Dataflow_Handle *dst_owner,
					  const void *dev_src, Dataflow_Handle *src_owner, uint64_t size)
{
	(void)dst_owner;
	(void)src_owner;
	return host_submit_copy(h, stream_id, dev_dst, dev_src, size);
}
