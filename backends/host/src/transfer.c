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

static Dataflow_Status submit_copy(Dataflow_Handle *h, int stream_id, void *dst, const void *src, uint64_t size)
{
	Task *t = task_new(TASK_COPY);
	if (!t)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "transfer: no memory for a task");
	t->u.copy.dst = dst;
	t->u.copy.src = src;
	t->u.copy.size = size;
	stream_enqueue(&host_of(h)->streams[stream_id], t);
	return DATAFLOW_OK;
}

static Dataflow_Status check_common(Dataflow_Handle *h, int stream_id, const char *what, uint64_t size)
{
	Dataflow_Status st = dataflow_check_stream_id(h, stream_id, what);
	return st != DATAFLOW_OK ? st : dataflow_check_size_bytes(what, size);
}

Dataflow_Status host_submit_inbound_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, const void *host_src,
					     uint64_t size)
{
	Dataflow_Status st = check_common(h, stream_id, "inbound transfer", size);
	if (st == DATAFLOW_OK)
		st = host_check_device_range(host_of(h), dev_dst, size, 0, "inbound transfer destination");
	if (st == DATAFLOW_OK && !host_src)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "inbound transfer source: host pointer is NULL");
	return st != DATAFLOW_OK ? st : submit_copy(h, stream_id, dev_dst, host_src, size);
}

Dataflow_Status host_submit_outbound_transfer(Dataflow_Handle *h, int stream_id, void *host_dst, const void *dev_src,
					      uint64_t size)
{
	Dataflow_Status st = check_common(h, stream_id, "outbound transfer", size);
	if (st == DATAFLOW_OK)
		st = host_check_device_range(host_of(h), dev_src, size, 0, "outbound transfer source");
	if (st == DATAFLOW_OK && !host_dst)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"outbound transfer destination: host pointer is NULL");
	return st != DATAFLOW_OK ? st : submit_copy(h, stream_id, host_dst, dev_src, size);
}

Dataflow_Status host_submit_peer_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, const void *dev_src,
					  uint64_t size)
{
	Dataflow_Status st = check_common(h, stream_id, "peer transfer", size);
	if (st == DATAFLOW_OK)
		st = host_check_device_range(host_of(h), dev_dst, size, 1, "peer transfer destination");
	if (st == DATAFLOW_OK)
		st = host_check_device_range(host_of(h), dev_src, size, 1, "peer transfer source");
	return st != DATAFLOW_OK ? st : submit_copy(h, stream_id, dev_dst, dev_src, size);
}
