/* The CUDA backend's event ring (backends/cuda/src/cuda_event_ring.c): what a dependency on a
 * stream state needs from the stream's counters. No GPU, no driver. */
#include "cuda_event_ring.h"

#include "c_test.h"

int main(void)
{
	const uint64_t R = CUDA_EVENT_RING;
	/* never handed out */
	EXPECT_TRUE(cuda_dependency_of(0, 5, 0) == CUDA_DEP_NEVER_RECORDED);
	EXPECT_TRUE(cuda_dependency_of(6, 5, 0) == CUDA_DEP_NEVER_RECORDED);
	/* recent and not known done: wait on its event */
	EXPECT_TRUE(cuda_dependency_of(5, 5, 0) == CUDA_DEP_WAIT);
	EXPECT_TRUE(cuda_dependency_of(1, R, 0) == CUDA_DEP_WAIT);
	/* known done: nothing to wait for, however old (a ring run depending on long-finished work) */
	EXPECT_TRUE(cuda_dependency_of(3, 5, 4) == CUDA_DEP_DONE);
	EXPECT_TRUE(cuda_dependency_of(1, 10 * R, 2) == CUDA_DEP_DONE);
	EXPECT_TRUE(cuda_dependency_of(5 * R, 5 * R, 5 * R) == CUDA_DEP_DONE);
	/* older than the ring, not known done: ask the slot's later record */
	EXPECT_TRUE(cuda_dependency_of(1, R + 1, 0) == CUDA_DEP_ASK_SLOT);
	EXPECT_TRUE(cuda_dependency_of(7, 3 * R + 100, 6) == CUDA_DEP_ASK_SLOT);
	/* the slot's latest record: the state itself, or the last one sharing its slot */
	EXPECT_TRUE(cuda_slot_latest(5, 5) == 5);
	EXPECT_TRUE(cuda_slot_latest(5, 5 + R - 1) == 5);
	EXPECT_TRUE(cuda_slot_latest(5, 5 + R) == 5 + R);
	EXPECT_TRUE(cuda_slot_latest(5, 5 + 3 * R + 7) == 5 + 3 * R);
	EXPECT_TRUE(cuda_slot_latest(7, 3 * R + 100) % R == 7 % R);
	return *c_test_failures() != 0;
}
