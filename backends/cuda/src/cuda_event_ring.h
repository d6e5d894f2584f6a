#ifndef DATAFLOW_CUDA_EVENT_RING_H
#define DATAFLOW_CUDA_EVENT_RING_H

#include <stdint.h>

/* Events per stream that stay distinct (see cuda_stream.c). */
#define CUDA_EVENT_RING 1024

/* What a dependency on state `event` of a stream needs, from the stream's counters (events
 * handed out, latest known done). Pure: tests/c/test_cuda_event_ring.c. */
typedef enum {
	CUDA_DEP_NEVER_RECORDED, /* 0, or past what the stream handed out: an error */
	CUDA_DEP_DONE,           /* known finished: nothing to wait for */
	CUDA_DEP_WAIT,           /* its CUevent still holds it: wait on that */
	CUDA_DEP_ASK_SLOT,       /* its CUevent was re-recorded by a later state: done if that one is
				  * (query it), else too old to wait on */
} Cuda_Dependency;

Cuda_Dependency cuda_dependency_of(uint64_t event, uint64_t recorded, uint64_t done);

/* The latest state recorded in event's ring slot (event itself or a later one). */
uint64_t cuda_slot_latest(uint64_t event, uint64_t recorded);

#endif
