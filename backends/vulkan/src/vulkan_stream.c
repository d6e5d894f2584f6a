#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan_backend.h"

/* Streams (the model is in vulkan_backend.h). A GPU item queued while CPU items of its stream
 * are pending goes through the worker too, so that no queue submission waits on a value the
 * host has yet to signal: a queue blocked on it would also hold up the other streams sharing
 * the queue (lavapipe has one). A stream's lock is held from taking a value to submitting it,
 * so that the values reach each queue in order. */

static _Thread_local Vulkan_Handle *worker_handle;

int vulkan_on_worker(Dataflow_Handle *h)
{
	return worker_handle == vulkan_of(h);
}

/* Keeps the first asynchronous failure for the next sync (stream lock held). */
static void fail_async(Vulkan_Stream *s, Dataflow_Status st)
{
	if (s->failure == DATAFLOW_OK) {
		s->failure = st;
		snprintf(s->failure_message, sizeof(s->failure_message), "%s", dataflow_last_error());
	}
}

static void release(Vulkan_Stream *s, int transfer, VkCommandBuffer cmd, VkBuffer buffer, VkDeviceMemory memory)
{
	Vulkan_Device *d = s->handle->dev;
	if (cmd)
		d->vk->vkFreeCommandBuffers(d->device, transfer ? s->transfer_pool : s->pool, 1, &cmd);
	vulkan_buffer_destroy(d, buffer, memory);
}

/* Frees what finished work used (stream lock held); all: everything (the stream is idle). */
static void sweep(Vulkan_Stream *s, int all)
{
	uint64_t done = 0;
	if (!all)
		s->handle->vk->vkGetSemaphoreCounterValue(s->handle->dev->device, s->timeline, &done);
	Vulkan_Garbage **p = &s->garbage;
	while (*p) {
		Vulkan_Garbage *g = *p;
		if (all || g->value <= done) {
			*p = g->next;
			release(s, g->transfer, g->cmd, g->buffer, g->memory);
			free(g);
		} else {
			p = &g->next;
		}
	}
}

/* Submits a GPU task (stream lock held) and files its resources as garbage. On failure its
 * command buffer is released, and its staging buffer too when own_staging (the caller has
 * already returned). */
static Dataflow_Status queue_submit(Vulkan_Stream *s, const Vulkan_Task *t, int own_staging)
{
	Vulkan_Handle *h = s->handle;
	VkSemaphore waits[2] = {s->timeline, t->other};
	uint64_t wait_values[2] = {t->value - 1, t->other_value};
	VkPipelineStageFlags stages[2] = {VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT};
	uint32_t num_waits = t->other ? 2 : 1;
	VkTimelineSemaphoreSubmitInfo timeline = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
						  .waitSemaphoreValueCount = num_waits,
						  .pWaitSemaphoreValues = wait_values,
						  .signalSemaphoreValueCount = 1,
						  .pSignalSemaphoreValues = &t->value};
	VkSubmitInfo info = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .pNext = &timeline,
			     .waitSemaphoreCount = num_waits, .pWaitSemaphores = waits, .pWaitDstStageMask = stages,
			     .commandBufferCount = t->cmd ? 1 : 0, .pCommandBuffers = &t->cmd,
			     .signalSemaphoreCount = 1, .pSignalSemaphores = &s->timeline};
	pthread_mutex_t *lock = t->transfer ? s->transfer_lock : s->queue_lock;
	pthread_mutex_lock(lock);
	VkResult r = h->vk->vkQueueSubmit(t->transfer ? s->transfer_queue : s->queue, 1, &info, VK_NULL_HANDLE);
	pthread_mutex_unlock(lock);
	Vulkan_Garbage *g = calloc(1, sizeof(*g));
	if (r != VK_SUCCESS || !g) {
		/* nothing will signal this value now: signal it, so later work does not wait forever */
		VkSemaphoreSignalInfo signal = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO,
						.semaphore = s->timeline, .value = t->value};
		if (r != VK_SUCCESS)
			h->vk->vkSignalSemaphore(h->dev->device, &signal);
		free(g);
		if (r != VK_SUCCESS)
			release(s, t->transfer, t->cmd, own_staging ? t->staging : VK_NULL_HANDLE,
				own_staging ? t->staging_memory : VK_NULL_HANDLE);
		char what[64];
		snprintf(what, sizeof(what), "vkQueueSubmit (stream %d)", s->id);
		return r != VK_SUCCESS ? vulkan_check(r, h->dev->index, what)
				       : dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "vulkan: no memory");
	}
	*g = (Vulkan_Garbage){s->garbage, t->value, t->transfer, t->cmd, t->staging, t->staging_memory};
	s->garbage = g;
	s->submitted = t->value;
	return DATAFLOW_OK;
}

static void *worker_main(void *arg)
{
	Vulkan_Stream *s = arg;
	Vulkan_Handle *h = s->handle;
	worker_handle = h;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (!s->tasks && !s->stopping)
			pthread_cond_wait(&s->cond, &s->lock);
		Vulkan_Task *t = s->tasks;
		if (!t)
			break;
		Dataflow_Status st = DATAFLOW_OK;
		if (t->run) {
			pthread_mutex_unlock(&s->lock);
			uint64_t before = t->value - 1;
			VkSemaphoreWaitInfo wait = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, .semaphoreCount = 1,
						    .pSemaphores = &s->timeline, .pValues = &before};
			st = vulkan_check(h->vk->vkWaitSemaphores(h->dev->device, &wait, UINT64_MAX), h->dev->index,
					  "vkWaitSemaphores (host work)");
			if (st == DATAFLOW_OK)
				t->run(t->arg);
			/* signalled even after a failure, so that later work does not wait forever */
			VkSemaphoreSignalInfo signal = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO,
							.semaphore = s->timeline, .value = t->value};
			h->vk->vkSignalSemaphore(h->dev->device, &signal);
			pthread_mutex_lock(&s->lock);
			s->submitted = t->value;
		} else {
			if (t->other_pending) {
				pthread_mutex_unlock(&s->lock);
				VkSemaphoreWaitInfo wait = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
							    .semaphoreCount = 1, .pSemaphores = &t->other,
							    .pValues = &t->other_value};
				st = vulkan_check(h->vk->vkWaitSemaphores(h->dev->device, &wait, UINT64_MAX),
						  h->dev->index, "vkWaitSemaphores (dependency)");
				pthread_mutex_lock(&s->lock);
			}
			Dataflow_Status submitted = queue_submit(s, t, 1);
			st = st != DATAFLOW_OK ? st : submitted;
		}
		if (st != DATAFLOW_OK)
			fail_async(s, st);
		s->tasks = t->next;
		if (!s->tasks)
			s->tasks_tail = NULL;
		free(t);
		pthread_cond_broadcast(&s->cond);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

Dataflow_Status vulkan_stream_add(Vulkan_Stream *s, const Vulkan_Task *task)
{
	Vulkan_Task *t = malloc(sizeof(*t));
	if (!t) {
		if (task->cmd) {
			pthread_mutex_lock(&s->lock);
			release(s, task->transfer, task->cmd, VK_NULL_HANDLE, VK_NULL_HANDLE);
			pthread_mutex_unlock(&s->lock);
		}
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "vulkan: stream %d: no memory for its work", s->id);
	}
	*t = *task;
	t->next = NULL;
	pthread_mutex_lock(&s->lock);
	sweep(s, 0);
	t->value = ++s->next;
	Dataflow_Status st = DATAFLOW_OK;
	if (!t->run && !s->tasks && !t->other_pending) {
		st = queue_submit(s, t, 0); /* the worker is idle: no CPU work to queue behind */
		free(t);
	} else {
		if (s->tasks_tail)
			s->tasks_tail->next = t;
		else
			s->tasks = t;
		s->tasks_tail = t;
		pthread_cond_broadcast(&s->cond);
	}
	pthread_mutex_unlock(&s->lock);
	return st;
}

Dataflow_Status vulkan_stream_begin(Vulkan_Stream *s, int transfer, VkCommandBuffer *cmd)
{
	Vulkan_Device *d = s->handle->dev;
	VkCommandBufferAllocateInfo info = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
					    .commandPool = transfer ? s->transfer_pool : s->pool,
					    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
	pthread_mutex_lock(&s->lock);
	VkResult r = d->vk->vkAllocateCommandBuffers(d->device, &info, cmd);
	pthread_mutex_unlock(&s->lock);
	Dataflow_Status st = vulkan_check(r, d->index, "vkAllocateCommandBuffers");
	if (st != DATAFLOW_OK)
		return st;
	VkCommandBufferBeginInfo begin = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
					  .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
	st = vulkan_check(d->vk->vkBeginCommandBuffer(*cmd, &begin), d->index, "vkBeginCommandBuffer");
	if (st != DATAFLOW_OK) {
		pthread_mutex_lock(&s->lock);
		release(s, transfer, *cmd, VK_NULL_HANDLE, VK_NULL_HANDLE);
		pthread_mutex_unlock(&s->lock);
	}
	return st;
}

Dataflow_Status vulkan_submit_host_op(Dataflow_Handle *h, int stream_id, Dataflow_Host_Fn func, void *arg)
{
	Vulkan_Task t = {.run = func, .arg = arg};
	return vulkan_stream_add(&vulkan_of(h)->streams[stream_id], &t);
}

Dataflow_Status vulkan_record_event(Dataflow_Handle *h, int stream_id, uint64_t *event)
{
	Vulkan_Stream *s = &vulkan_of(h)->streams[stream_id];
	pthread_mutex_lock(&s->lock);
	*event = s->next;
	pthread_mutex_unlock(&s->lock);
	return DATAFLOW_OK;
}

int vulkan_query_event(Dataflow_Handle *h, int stream_id, uint64_t event)
{
	Vulkan_Handle *vh = vulkan_of(h);
	uint64_t done = 0;
	if (vh->vk->vkGetSemaphoreCounterValue(vh->dev->device, vh->streams[stream_id].timeline, &done) != VK_SUCCESS)
		return 0;
	return done >= event;
}

Dataflow_Status vulkan_wait_event(Dataflow_Handle *h, int stream_id, uint64_t event)
{
	Vulkan_Handle *vh = vulkan_of(h);
	VkSemaphoreWaitInfo wait = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, .semaphoreCount = 1,
				    .pSemaphores = &vh->streams[stream_id].timeline, .pValues = &event};
	return vulkan_check(vh->vk->vkWaitSemaphores(vh->dev->device, &wait, UINT64_MAX), vh->dev->index,
			    "vkWaitSemaphores");
}

/* Handles of one device share its semaphores: the wait is queued. Another device's semaphore
 * cannot be waited on by this device's queues without exporting it, so the caller waits. */
Dataflow_Status vulkan_submit_dependency(Dataflow_Handle *h, int stream_id, Dataflow_Handle *other,
					 int other_stream_id, uint64_t event)
{
	Vulkan_Handle *vh = vulkan_of(h), *vo = vulkan_of(other);
	if (vo->dev != vh->dev)
		return vulkan_wait_event(other, other_stream_id, event);
	Vulkan_Stream *o = &vo->streams[other_stream_id];
	pthread_mutex_lock(&o->lock);
	int pending = o->submitted < event;
	pthread_mutex_unlock(&o->lock);
	Vulkan_Task t = {.other = o->timeline, .other_value = event, .other_pending = pending};
	return vulkan_stream_add(&vh->streams[stream_id], &t);
}

Dataflow_Status vulkan_sync_stream(Dataflow_Handle *h, int stream_id)
{
	Vulkan_Stream *s = &vulkan_of(h)->streams[stream_id];
	uint64_t event;
	vulkan_record_event(h, stream_id, &event);
	Dataflow_Status st = vulkan_wait_event(h, stream_id, event);
	pthread_mutex_lock(&s->lock);
	while (s->tasks) /* a failed submission signals its value before it leaves the queue */
		pthread_cond_wait(&s->cond, &s->lock);
	sweep(s, 0);
	if (st == DATAFLOW_OK && s->failure != DATAFLOW_OK) {
		st = dataflow_set_error(s->failure, "%s", s->failure_message);
		s->failure = DATAFLOW_OK;
	}
	pthread_mutex_unlock(&s->lock);
	return st;
}

Dataflow_Status vulkan_streams_create(Vulkan_Handle *h, int num_streams)
{
	Vulkan_Device *d = h->dev;
	const Vulkan_Functions *vk = h->vk;
	for (int i = 0; i < num_streams; i++) {
		Vulkan_Stream *s = &h->streams[i];
		s->handle = h;
		s->id = i;
		s->queue = d->compute_queues[i % d->num_compute_queues];
		s->queue_lock = &d->compute_locks[i % d->num_compute_queues];
		s->transfer_queue = d->num_transfer_queues ? d->transfer_queues[i % d->num_transfer_queues] : s->queue;
		s->transfer_lock = d->num_transfer_queues ? &d->transfer_locks[i % d->num_transfer_queues] : s->queue_lock;
		VkSemaphoreTypeCreateInfo type = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
						  .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE};
		VkSemaphoreCreateInfo sem = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &type};
		VkCommandPoolCreateInfo pool = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
						.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT,
						.queueFamilyIndex = d->compute_family};
		Dataflow_Status st = vulkan_check(vk->vkCreateSemaphore(d->device, &sem, NULL, &s->timeline), d->index,
						  "vkCreateSemaphore");
		if (st == DATAFLOW_OK)
			st = vulkan_check(vk->vkCreateCommandPool(d->device, &pool, NULL, &s->pool), d->index,
					  "vkCreateCommandPool");
		pool.queueFamilyIndex = d->transfer_family;
		if (st == DATAFLOW_OK)
			st = vulkan_check(vk->vkCreateCommandPool(d->device, &pool, NULL, &s->transfer_pool), d->index,
					  "vkCreateCommandPool");
		pthread_mutex_init(&s->lock, NULL);
		pthread_cond_init(&s->cond, NULL);
		h->num_streams = i + 1;
		if (st == DATAFLOW_OK && pthread_create(&s->worker, NULL, worker_main, s) != 0)
			st = dataflow_set_error(DATAFLOW_ERR_BACKEND, "vulkan: cannot start the worker of stream %d", i);
		s->worker_running = st == DATAFLOW_OK;
		if (st != DATAFLOW_OK)
			return st;
	}
	return DATAFLOW_OK;
}

/* Waits until the queue has let go of everything submitted to it (its lock held). */
static void queue_idle(const Vulkan_Functions *vk, VkQueue queue, pthread_mutex_t *lock)
{
	pthread_mutex_lock(lock);
	vk->vkQueueWaitIdle(queue);
	pthread_mutex_unlock(lock);
}

/* libdataflow has waited for the streams' work. A stream's submissions may wait on another
 * stream's timeline, and a driver can still hold such a wait after the value it signals is
 * reached (lavapipe releases its timeline wait points on its queue thread after the signal: it
 * crashed in that list when a semaphore went first), so every worker stops and every queue is
 * idle before any semaphore or pool goes. */
void vulkan_streams_destroy(Vulkan_Handle *h)
{
	const Vulkan_Functions *vk = h->vk;
	VkDevice dev = h->dev->device;
	for (int i = 0; i < h->num_streams; i++) {
		Vulkan_Stream *s = &h->streams[i];
		pthread_mutex_lock(&s->lock);
		s->stopping = 1;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
		if (s->worker_running)
			pthread_join(s->worker, NULL);
		uint64_t last = s->next;
		VkSemaphoreWaitInfo wait = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, .semaphoreCount = 1,
					    .pSemaphores = &s->timeline, .pValues = &last};
		if (s->timeline)
			vk->vkWaitSemaphores(dev, &wait, UINT64_MAX);
	}
	for (int i = 0; i < h->num_streams; i++) {
		Vulkan_Stream *s = &h->streams[i];
		if (s->queue)
			queue_idle(vk, s->queue, s->queue_lock);
		if (s->transfer_queue)
			queue_idle(vk, s->transfer_queue, s->transfer_lock);
	}
	for (int i = 0; i < h->num_streams; i++) {
		Vulkan_Stream *s = &h->streams[i];
		sweep(s, 1);
		if (s->pool)
			vk->vkDestroyCommandPool(dev, s->pool, NULL);
		if (s->transfer_pool)
			vk->vkDestroyCommandPool(dev, s->transfer_pool, NULL);
		if (s->timeline)
			vk->vkDestroySemaphore(dev, s->timeline, NULL);
		pthread_mutex_destroy(&s->lock);
		pthread_cond_destroy(&s->cond);
	}
	h->num_streams = 0;
}
