#include "host.h"

/* Device memory is the arena; the ledger in libdataflow has accounted and checked every call
 * by the time it gets here, and releases a freed block only once no queued work can use it. */

Dataflow_Status host_mem_alloc(Dataflow_Handle *h, uint64_t size, void **ptr)
{
	return arena_alloc(&host_of(h)->arena, size, ptr);
}

void host_mem_release(Dataflow_Handle *h, void *ptr, uint64_t size)
{
	arena_release(&host_of(h)->arena, ptr, size);
}

Dataflow_Status host_set_mem(Dataflow_Handle *h, int stream_id, void *ptr, uint8_t value, uint64_t size)
{
	return host_enqueue_work(h, stream_id, TASK_MEMSET, (Task_Work){.memset = {.dst = ptr, .size = size, .value = value}},
				 "set_mem");
}
