#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan_backend.h"

/* submit_op: a native kernel becomes one dispatch of its pipeline with the op's arguments as
 * push constants (recorded into the command buffer, so the caller may reuse its Op at once);
 * an external op is called now on the caller's thread and queues its own work. */

/* Whether SPIR-V words declare a capability: OpCapability (opcode 17, 2 words) instructions
 * come first, after the 5-word header. */
static int declares_capability(const Dataflow_Vulkan_Shader *shader, uint32_t capability)
{
	size_t n = shader->size_bytes / 4;
	for (size_t i = 5; i + 1 < n && shader->words[i] == (2u << 16 | 17u); i += 2)
		if (shader->words[i + 1] == capability)
			return 1;
	return 0;
}

/* The pipeline of a shader, made once per handle (h->lock held). */
static Dataflow_Status pipeline_for(Vulkan_Handle *h, Vulkan_Op *rec, VkPipeline *out)
{
	for (Vulkan_Pipeline *p = h->pipelines; p; p = p->next)
		if (p->shader == rec->shader) {
			*out = p->pipeline;
			return DATAFLOW_OK;
		}
	Vulkan_Device *d = h->dev;
	if (!d->float64 && declares_capability(rec->shader, 10 /* Float64 */))
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "vulkan: kernel %s computes in fp64, which device %d (%s) does not offer "
					  "(shaderFloat64)",
					  rec->kernel_name, d->index, d->props.deviceName);
	Vulkan_Pipeline *p = calloc(1, sizeof(*p));
	if (!p)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "vulkan: no memory for a pipeline");
	char what[256];
	snprintf(what, sizeof(what), "vkCreateShaderModule (%s)", rec->kernel_name);
	VkShaderModuleCreateInfo module = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
					   .codeSize = rec->shader->size_bytes, .pCode = rec->shader->words};
	Dataflow_Status st = vulkan_check(h->vk->vkCreateShaderModule(d->device, &module, NULL, &p->module), d->index,
					  what);
	VkComputePipelineCreateInfo info = {
		.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
		.stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
			  .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = p->module, .pName = "main"},
		.layout = d->layout};
	snprintf(what, sizeof(what), "vkCreateComputePipelines (%s)", rec->kernel_name);
	if (st == DATAFLOW_OK)
		st = vulkan_check(h->vk->vkCreateComputePipelines(d->device, VK_NULL_HANDLE, 1, &info, NULL, &p->pipeline),
				  d->index, what);
	if (st != DATAFLOW_OK) {
		if (p->module)
			h->vk->vkDestroyShaderModule(d->device, p->module, NULL);
		free(p);
		return st;
	}
	p->shader = rec->shader;
	p->next = h->pipelines;
	h->pipelines = p;
	*out = p->pipeline;
	return DATAFLOW_OK;
}

void vulkan_pipelines_destroy(Vulkan_Handle *h)
{
	for (Vulkan_Pipeline *p = h->pipelines, *next; p; p = next) {
		next = p->next;
		h->vk->vkDestroyPipeline(h->dev->device, p->pipeline, NULL);
		h->vk->vkDestroyShaderModule(h->dev->device, p->module, NULL);
		free(p);
	}
	h->pipelines = NULL;
}

/* The push-constant block: each argument aligned to its size, tensors as 8-byte addresses. */
static Dataflow_Status pack(const Vulkan_Handle *h, const Op *op, uint8_t *block, uint32_t *size)
{
	uint32_t at = 0, limit = h->dev->props.limits.maxPushConstantsSize;
	for (int i = 0; i < op->skeleton.num_args; i++) {
		DataflowDatatype dt = op->skeleton.arg_dtypes[i];
		uint32_t n = dataflow_datatype_is_scalar(dt) ? (uint32_t)dataflow_datatype_size(dt) : 8;
		at = (at + n - 1) / n * n;
		if (at + n > limit)
			return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
						  "op '%s': its arguments need more than the device's %u bytes of push "
						  "constants (argument %d ends at byte %u)",
						  op->skeleton.nickname, limit, i, at + n);
		if (dataflow_datatype_is_scalar(dt)) {
			memcpy(block + at, op->op_args[i], n);
		} else {
			uint64_t address = (uint64_t)(uintptr_t)*(void *const *)op->op_args[i];
			memcpy(block + at, &address, 8);
		}
		at += n;
	}
	*size = (at + 3) / 4 * 4;
	return DATAFLOW_OK;
}

Dataflow_Status vulkan_dispatch(Vulkan_Handle *h, int stream_id, Vulkan_Op *rec, const Op *op,
				const uint32_t groups[3])
{
	uint8_t block[256] = {0};
	uint32_t size = 0;
	VkPipeline pipeline = VK_NULL_HANDLE;
	Dataflow_Status st = pack(h, op, block, &size);
	if (st == DATAFLOW_OK) {
		pthread_mutex_lock(&h->lock);
		st = pipeline_for(h, rec, &pipeline);
		pthread_mutex_unlock(&h->lock);
	}
	Vulkan_Stream *s = &h->streams[stream_id];
	Vulkan_Task t = {0};
	if (st == DATAFLOW_OK)
		st = vulkan_stream_begin(s, 0, &t.cmd);
	if (st != DATAFLOW_OK)
		return st;
	const Vulkan_Functions *vk = h->vk;
	vk->vkCmdBindPipeline(t.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
	if (size)
		vk->vkCmdPushConstants(t.cmd, h->dev->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, size, block);
	vk->vkCmdDispatch(t.cmd, groups[0], groups[1], groups[2]);
	st = vulkan_check(vk->vkEndCommandBuffer(t.cmd), h->dev->index, "vkEndCommandBuffer");
	return st == DATAFLOW_OK ? vulkan_stream_add(s, &t) : st;
}

static Dataflow_Status launch_native(Vulkan_Handle *h, Vulkan_Op *rec, void *state, const Op *op, int stream_id)
{
	Dataflow_Launch_Config c = {{0, 0, 0}, {0, 0, 0}, 0, 1};
	DATAFLOW_TRY(rec->launch(h->handle, op, state, &c));
	if (c.grid[0] == 0)
		return DATAFLOW_OK; /* the launch function found nothing to do */
	uint32_t *max = h->dev->props.limits.maxComputeWorkGroupCount;
	for (int d = 0; d < 3; d++)
		if (c.grid[d] == 0 || c.grid[d] > max[d])
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "op '%s': launch function chose %u x %u x %u workgroups; each must be in "
						  "1..(%u, %u, %u)",
						  op->skeleton.nickname, c.grid[0], c.grid[1], c.grid[2], max[0], max[1], max[2]);
	return vulkan_dispatch(h, stream_id, rec, op, c.grid);
}

Dataflow_Status vulkan_submit_op(Dataflow_Handle *h, int stream_id, const Op *op, const Dataflow_Op_Entry *entry)
{
	if (entry->record)
		return launch_native(vulkan_of(h), entry->record, entry->state.data, op, stream_id);
	Dataflow_Status st = entry->external(h, stream_id, op, entry->state.data);
	if (st != DATAFLOW_OK) {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", dataflow_last_error());
		return dataflow_set_error(st, "external op '%s' failed: %s", op->skeleton.nickname, msg);
	}
	return DATAFLOW_OK;
}
