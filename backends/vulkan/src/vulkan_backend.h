#ifndef DATAFLOW_VULKAN_BACKEND_H
#define DATAFLOW_VULKAN_BACKEND_H

/* Private to the Vulkan backend.
 *
 * A handle is one physical device. Its VkDevice is shared by every handle of that device in
 * the process (as CUDA's primary context is), so that events, memory and peer copies work
 * across those handles. Device pointers are buffer device addresses: kernels receive them as
 * push constants exactly as CUDA kernels receive pointers, and the ledger checks them like
 * any other pointer. Memory comes from large device-local blocks carved by a block list.
 *
 * A stream is a timeline semaphore plus a worker thread. Every piece of stream work takes the
 * next value v of the stream's timeline, waits for v - 1 and signals v: GPU work as a queue
 * submission (wait-before-signal, so it can be queued behind CPU work not yet done), CPU work
 * (host ops, staging copies) on the worker, which waits on the host and signals from the host.
 * An event is a timeline value; a dependency is a submission with no command buffer that
 * waits on the other stream's semaphore. A queue submission never waits for a signal that is
 * not queued ahead of it (queues may run in order, and lavapipe's one queue does: it would
 * deadlock); such a dependency goes through the worker, which waits on the host first. */

#include <pthread.h>
#include <stdint.h>

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "block_list.h"
#include "dataflow/backend.h"
#include "dataflow/vulkan.h"
#include "vulkan_loader.h"

#define VULKAN_ALIGN 256
#define VULKAN_BLOCK_BYTES (64ull << 20) /* allocations below half of this share blocks */

/* Mesa's llvmpipe (lavapipe) bounds the loops of a shader: LP_MAX_TGSI_LOOP_ITERATIONS, 65535,
 * "shared between every loop" (src/gallium/auxiliary/gallivm/lp_bld_limits.h). One counter per
 * shader invocation, set to it at the start (lp_exec_mask_function_init, lp_bld_ir_common.c) and
 * decremented at every pass through the end of any loop (lp_exec_endloop), which leaves the loop
 * once it reaches 0: so iterations add up over sequential loops and multiply over nested ones,
 * and loops whose trip count is a constant that NIR unrolls do not count. The invocation goes on
 * with the rest of its work undone, without an error. Measured here (Mesa 22.3, embedding_bwd_w
 * with one loop over the tokens): 65535 tokens sum right, 65536 sum 65535 of them. */
#define VULKAN_LLVMPIPE_MAX_LOOP_ITERATIONS 65535


/* The device shared by the handles of one physical device. */
typedef struct Vulkan_Device {
	struct Vulkan_Device *next;
	int index, refs;
	const Vulkan_Functions *vk;
	VkPhysicalDevice physical;
	VkDevice device;
	VkPhysicalDeviceProperties props;
	VkPhysicalDeviceMemoryProperties memory;
	int float64; /* shaderFloat64: enabled where the device has it */
	/* The most loop iterations one kernel invocation may run, all its loops together; 0: no
	 * limit. Mesa's llvmpipe (lavapipe) ends every loop of an invocation silently once they
	 * have run LP_MAX_TGSI_LOOP_ITERATIONS (65535) in all, so the default ops' launches refuse
	 * shapes past it there (vulkan_default_ops.c) rather than compute wrong numbers. */
	uint32_t max_loop_iterations;
	uint32_t compute_family, transfer_family; /* transfer_family == compute_family: none apart */
	uint32_t num_compute_queues, num_transfer_queues;
	VkQueue *compute_queues, *transfer_queues;
	pthread_mutex_t *compute_locks, *transfer_locks; /* vkQueueSubmit needs the queue to itself */
	VkPipelineLayout layout;                         /* push constants only */
	uint32_t device_local_type, staging_type;
} Vulkan_Device;

typedef struct Vulkan_Handle Vulkan_Handle;

/* An item of stream work with its timeline value (waits for value - 1, signals value): CPU
 * work (run) on the stream's worker, or a queue submission of cmd (VK_NULL_HANDLE: a bare
 * wait) with at most one wait on another stream and a staging buffer to release after. */
typedef struct Vulkan_Task {
	struct Vulkan_Task *next;
	uint64_t value;
	void (*run)(void *arg);
	void *arg;
	int transfer; /* on the transfer queue, cmd from the transfer pool */
	VkCommandBuffer cmd;
	VkSemaphore other;
	uint64_t other_value;
	int other_pending; /* other_value's signal is not queued yet: the worker waits for it first */
	VkBuffer staging;
	VkDeviceMemory staging_memory;
} Vulkan_Task;

/* Resources to release once the stream's timeline reached value. */
typedef struct Vulkan_Garbage {
	struct Vulkan_Garbage *next;
	uint64_t value;
	int transfer;
	VkCommandBuffer cmd;
	VkBuffer buffer;
	VkDeviceMemory memory;
} Vulkan_Garbage;

typedef struct {
	Vulkan_Handle *handle;
	int id;
	VkSemaphore timeline;
	VkQueue queue, transfer_queue;
	pthread_mutex_t *queue_lock, *transfer_lock;
	pthread_mutex_t lock; /* guards next, the pools, tasks, garbage, failure and queue order */
	pthread_cond_t cond;
	uint64_t next;        /* the last value handed out */
	uint64_t submitted;   /* the last value whose signal is queued (or done, for CPU work) */
	VkCommandPool pool, transfer_pool;
	Vulkan_Task *tasks, *tasks_tail;
	Vulkan_Garbage *garbage;
	pthread_t worker;
	int worker_running, stopping;
	Dataflow_Status failure; /* first asynchronous failure, reported by sync */
	char failure_message[512];
} Vulkan_Stream;

/* A device-local block: one VkBuffer over one allocation, carved into 256-byte aligned pieces. */
typedef struct {
	VkDeviceMemory memory;
	VkBuffer buffer;
	uint64_t address, size;
	Block_List free;
	uint64_t used;
} Vulkan_Block;

/* A native op's record (freed by libdataflow when the op goes). */
typedef struct {
	const Dataflow_Vulkan_Shader *shader;
	char kernel_name[160];
	Dataflow_Launch_Fn launch;
} Vulkan_Op;

/* A shader's pipeline, made at its first dispatch and kept by the handle. */
typedef struct Vulkan_Pipeline {
	struct Vulkan_Pipeline *next;
	const Dataflow_Vulkan_Shader *shader;
	VkShaderModule module;
	VkPipeline pipeline;
} Vulkan_Pipeline;

struct Vulkan_Handle {
	Dataflow_Handle *handle;
	Vulkan_Device *dev;
	const Vulkan_Functions *vk;
	int num_streams;
	Vulkan_Stream streams[DATAFLOW_MAX_STREAMS];
	pthread_mutex_t lock; /* guards the blocks and the pipelines */
	Vulkan_Pipeline *pipelines;
	Vulkan_Block *blocks;
	int num_blocks, cap_blocks;
	VkBuffer bytes_buffer; /* byte v at offset 4 * v: the source of set_mem's unaligned ends */
	VkDeviceMemory bytes_memory;
	char ops_library_path[4096];
};

static inline Vulkan_Handle *vulkan_of(Dataflow_Handle *h)
{
	return h->ctx;
}

/* VkResult -> status with "vulkan:<index>: <what> failed: <result name>". */
Dataflow_Status vulkan_check(VkResult r, int index, const char *what);

/* vulkan_device.c: the shared devices and their listing. */
Dataflow_Status vulkan_device_acquire(int index, Vulkan_Device **dev);
void vulkan_device_release(Vulkan_Device *dev);
/* A VkBuffer (storage | transfer | device address usage) bound to fresh memory of the type. */
Dataflow_Status vulkan_buffer_create(Vulkan_Device *dev, uint64_t size, uint32_t memory_type, VkBuffer *buffer,
				     VkDeviceMemory *memory);
void vulkan_buffer_destroy(Vulkan_Device *dev, VkBuffer buffer, VkDeviceMemory memory);

/* vulkan_stream.c */
Dataflow_Status vulkan_streams_create(Vulkan_Handle *h, int num_streams);
void vulkan_streams_destroy(Vulkan_Handle *h);
/* A one-time command buffer of the stream's pool (the transfer queue's when transfer is set)
 * in the recording state. */
Dataflow_Status vulkan_stream_begin(Vulkan_Stream *s, int transfer, VkCommandBuffer *cmd);
/* Queues task (copied; value is set here) as the stream's next work. A GPU task's cmd must
 * have ended recording; on failure its cmd is released, its staging buffer stays the caller's. */
Dataflow_Status vulkan_stream_add(Vulkan_Stream *s, const Vulkan_Task *task);

/* vulkan_memory.c: 1 and the buffer and offset of [address, address + size) if a block of h
 * holds it, else 0. */
int vulkan_find_buffer(Vulkan_Handle *h, uint64_t address, uint64_t size, VkBuffer *buffer, uint64_t *offset);
void vulkan_memory_destroy(Vulkan_Handle *h);

/* vulkan_submit.c: records op (a native kernel) as a dispatch of groups workgroups. */
Dataflow_Status vulkan_dispatch(Vulkan_Handle *h, int stream_id, Vulkan_Op *rec, const Op *op,
				const uint32_t groups[3]);
void vulkan_pipelines_destroy(Vulkan_Handle *h);

/* interface entries */
DATAFLOW_BACKEND_DECLARE_ENTRIES(vulkan);
int vulkan_on_worker(Dataflow_Handle *h);
Dataflow_Status vulkan_enable_peer(Dataflow_Handle *h, Dataflow_Handle *peer);

Dataflow_Status vulkan_submit_inbound_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst,
					       const void *host_src, uint64_t size);
Dataflow_Status vulkan_submit_outbound_transfer(Dataflow_Handle *h, int stream_id, void *host_dst,
						const void *dev_src, uint64_t size);
Dataflow_Status vulkan_submit_peer_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst,
					    Dataflow_Handle *dst_owner, const void *dev_src, Dataflow_Handle *src_owner,
					    uint64_t size);

#endif
