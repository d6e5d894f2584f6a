#include "cuda_event_ring.h"

/* (cuda_event_ring.h) A state more than a ring old is refused only when it may still be
 * running: once done (known, or its slot's later record is), a wait on it is a no-op. */
Cuda_Dependency cuda_dependency_of(uint64_t event, uint64_t recorded, uint64_t done)
{
	if (event == 0 || event > recorded)
		return CUDA_DEP_NEVER_RECORDED;
	if (event <= done)
		return CUDA_DEP_DONE;
	return recorded - event < CUDA_EVENT_RING ? CUDA_DEP_WAIT : CUDA_DEP_ASK_SLOT;
}

uint64_t cuda_slot_latest(uint64_t event, uint64_t recorded)
{
	return event + (recorded - event) / CUDA_EVENT_RING * CUDA_EVENT_RING;
}
