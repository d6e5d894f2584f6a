#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataflow/vulkan.h"
#include "vulkan_backend.h"

/* The devices in use, shared by their handles (guarded by devices_lock). */
static Vulkan_Device *devices;
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;

#define MAX_PHYSICAL 16
#define MAX_QUEUES 8

/* The features every kernel and the stream model rely on; missing ones are listed in `missing`.
 * The feature structs are filled by the query and passed on to vkCreateDevice. */
typedef struct {
	VkPhysicalDeviceFeatures2 base;
	VkPhysicalDeviceVulkan11Features v11;
	VkPhysicalDeviceVulkan12Features v12;
} Features;

static int query_features(const Vulkan_Functions *vk, VkPhysicalDevice pd, Features *f, char *missing, size_t size)
{
	memset(f, 0, sizeof(*f));
	f->base.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
	f->v11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
	f->v12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
	f->base.pNext = &f->v11;
	f->v11.pNext = &f->v12;
	VkPhysicalDeviceProperties props;
	vk->vkGetPhysicalDeviceProperties(pd, &props);
	missing[0] = 0;
	if (props.apiVersion < VK_API_VERSION_1_2) {
		snprintf(missing, size, "Vulkan 1.2 (device has %u.%u)", VK_API_VERSION_MAJOR(props.apiVersion),
			 VK_API_VERSION_MINOR(props.apiVersion));
		return 0;
	}
	vk->vkGetPhysicalDeviceFeatures2(pd, &f->base);
	struct {
		VkBool32 have;
		const char *name;
	} need[] = {
		{f->v12.bufferDeviceAddress, "bufferDeviceAddress"},
		{f->v12.timelineSemaphore, "timelineSemaphore"},
		{f->base.features.shaderInt64, "shaderInt64"},
		{f->v11.storageBuffer16BitAccess, "storageBuffer16BitAccess"},
		{f->v12.storageBuffer8BitAccess, "storageBuffer8BitAccess"},
	};
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
		if (!need[i].have)
			snprintf(missing + strlen(missing), size - strlen(missing), "%s%s", missing[0] ? ", " : "",
				 need[i].name);
	return missing[0] == 0;
}

static uint64_t device_local_bytes(const VkPhysicalDeviceMemoryProperties *m)
{
	uint64_t best = 0;
	for (uint32_t i = 0; i < m->memoryHeapCount; i++)
		if ((m->memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && m->memoryHeaps[i].size > best)
			best = m->memoryHeaps[i].size;
	return best;
}

static const char *type_name(VkPhysicalDeviceType t)
{
	switch (t) {
	case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
	case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
	case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
	case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
	default: return "other";
	}
}

static Dataflow_Status enumerate(const Vulkan_Functions *vk, VkPhysicalDevice *pds, uint32_t *count)
{
	*count = MAX_PHYSICAL;
	VkResult r = vk->vkEnumeratePhysicalDevices(vk->instance, count, pds);
	return r == VK_INCOMPLETE ? DATAFLOW_OK : vulkan_check(r, -1, "vkEnumeratePhysicalDevices");
}

Dataflow_Status dataflow_vulkan_list_devices(Dataflow_Vulkan_Device_Info *out, int max, int *count)
{
	const Vulkan_Functions *vk;
	VkPhysicalDevice pds[MAX_PHYSICAL];
	uint32_t n = 0;
	if (!count || (max > 0 && !out))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "vulkan_list_devices: count is NULL, or devices is NULL with max %d > 0", max);
	Dataflow_Status st = vulkan_loader_load(&vk);
	if (st == DATAFLOW_OK)
		st = enumerate(vk, pds, &n);
	if (st != DATAFLOW_OK)
		return st;
	for (uint32_t i = 0; i < n && (int)i < max; i++) {
		Dataflow_Vulkan_Device_Info *d = &out[i];
		VkPhysicalDeviceProperties p;
		VkPhysicalDeviceMemoryProperties m;
		VkPhysicalDeviceSubgroupProperties sub = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
		Features f;
		vk->vkGetPhysicalDeviceProperties(pds[i], &p);
		vk->vkGetPhysicalDeviceMemoryProperties(pds[i], &m);
		memset(d, 0, sizeof(*d));
		d->index = (int)i;
		snprintf(d->name, sizeof(d->name), "%s", p.deviceName);
		snprintf(d->type, sizeof(d->type), "%s", type_name(p.deviceType));
		d->vendor_id = p.vendorID;
		d->device_id = p.deviceID;
		d->api_version = p.apiVersion;
		d->device_local_bytes = device_local_bytes(&m);
		d->max_shared_memory_bytes = p.limits.maxComputeSharedMemorySize;
		d->usable = query_features(vk, pds[i], &f, d->missing, sizeof(d->missing));
		VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sub};
		vk->vkGetPhysicalDeviceProperties2(pds[i], &p2);
		d->subgroup_size = sub.subgroupSize;
	}
	*count = (int)n;
	return DATAFLOW_OK;
}

/* The compute family (preferring one without graphics), and a transfer-only family if any. */
static void pick_families(const Vulkan_Functions *vk, Vulkan_Device *d)
{
	VkQueueFamilyProperties fam[32];
	uint32_t n = 32;
	vk->vkGetPhysicalDeviceQueueFamilyProperties(d->physical, &n, fam);
	int compute = -1, transfer = -1;
	for (uint32_t i = 0; i < n; i++) {
		VkQueueFlags q = fam[i].queueFlags;
		if ((q & VK_QUEUE_COMPUTE_BIT) && (compute < 0 || !(q & VK_QUEUE_GRAPHICS_BIT)))
			compute = (int)i;
		if ((q & VK_QUEUE_TRANSFER_BIT) && !(q & (VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT)) && transfer < 0)
			transfer = (int)i;
	}
	d->compute_family = (uint32_t)compute;
	d->num_compute_queues = compute < 0 ? 0 : fam[compute].queueCount;
	d->transfer_family = transfer < 0 ? d->compute_family : (uint32_t)transfer;
	d->num_transfer_queues = transfer < 0 ? 0 : fam[transfer].queueCount;
	if (d->num_compute_queues > MAX_QUEUES)
		d->num_compute_queues = MAX_QUEUES;
	if (d->num_transfer_queues > MAX_QUEUES)
		d->num_transfer_queues = MAX_QUEUES;
}

/* A memory type with all of `want` (and, preferred, none of `avoid`), or UINT32_MAX. */
static uint32_t memory_type(const VkPhysicalDeviceMemoryProperties *m, VkMemoryPropertyFlags want,
			    VkMemoryPropertyFlags avoid)
{
	uint32_t found = UINT32_MAX;
	for (uint32_t i = 0; i < m->memoryTypeCount; i++) {
		VkMemoryPropertyFlags f = m->memoryTypes[i].propertyFlags;
		if ((f & want) == want) {
			if (!(f & avoid))
				return i;
			if (found == UINT32_MAX)
				found = i;
		}
	}
	return found;
}

static void device_destroy(Vulkan_Device *d)
{
	const Vulkan_Functions *vk = d->vk;
	if (d->device) {
		if (d->layout)
			vk->vkDestroyPipelineLayout(d->device, d->layout, NULL);
		vk->vkDestroyDevice(d->device, NULL);
	}
	for (uint32_t i = 0; d->compute_locks && i < d->num_compute_queues; i++)
		pthread_mutex_destroy(&d->compute_locks[i]);
	for (uint32_t i = 0; d->transfer_locks && i < d->num_transfer_queues; i++)
		pthread_mutex_destroy(&d->transfer_locks[i]);
	free(d->compute_queues);
	free(d->compute_locks);
	free(d->transfer_queues);
	free(d->transfer_locks);
	free(d);
}

static Dataflow_Status device_create(const Vulkan_Functions *vk, int index, Vulkan_Device **out)
{
	VkPhysicalDevice pds[MAX_PHYSICAL];
	uint32_t n = 0;
	Dataflow_Status st = enumerate(vk, pds, &n);
	if (st != DATAFLOW_OK)
		return st;
	if (n == 0)
		return dataflow_set_error(DATAFLOW_ERR_BACKEND,
					  "vulkan backend: the Vulkan loader found no device (install a driver; Debian: "
					  "mesa-vulkan-drivers gives lavapipe, a CPU device)");
	if (index >= (int)n) {
		char names[1024] = "";
		for (uint32_t i = 0; i < n; i++) {
			VkPhysicalDeviceProperties p;
			vk->vkGetPhysicalDeviceProperties(pds[i], &p);
			snprintf(names + strlen(names), sizeof(names) - strlen(names), "%svulkan:%u = %s", i ? ", " : "", i,
				 p.deviceName);
		}
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "vulkan backend: vulkan:%d requested, %u device(s): %s",
					  index, n, names);
	}
	Features f;
	char missing[256];
	if (!query_features(vk, pds[index], &f, missing, sizeof(missing))) {
		VkPhysicalDeviceProperties p;
		vk->vkGetPhysicalDeviceProperties(pds[index], &p);
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED, "vulkan backend: vulkan:%d (%s) lacks %s", index,
					  p.deviceName, missing);
	}
	Vulkan_Device *d = calloc(1, sizeof(*d));
	if (!d)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "vulkan backend: no memory for the device");
	d->index = index;
	d->vk = vk;
	d->physical = pds[index];
	vk->vkGetPhysicalDeviceProperties(d->physical, &d->props);
	vk->vkGetPhysicalDeviceMemoryProperties(d->physical, &d->memory);
	VkPhysicalDeviceDriverProperties driver = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
	VkPhysicalDeviceProperties2 props2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &driver};
	vk->vkGetPhysicalDeviceProperties2(d->physical, &props2);
	d->max_loop_iterations = driver.driverID == VK_DRIVER_ID_MESA_LLVMPIPE ? VULKAN_LLVMPIPE_MAX_LOOP_ITERATIONS : 0;
	pick_families(vk, d);
	d->device_local_type = memory_type(&d->memory, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
	d->staging_type = memory_type(&d->memory,
				      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
					      VK_MEMORY_PROPERTY_HOST_CACHED_BIT,
				      0);
	if (d->staging_type == UINT32_MAX)
		d->staging_type = memory_type(&d->memory,
					      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, 0);
	if (!d->num_compute_queues || d->device_local_type == UINT32_MAX || d->staging_type == UINT32_MAX) {
		device_destroy(d);
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "vulkan backend: vulkan:%d (%s) lacks a compute queue, device-local memory or "
					  "host-visible coherent memory",
					  index, d->props.deviceName);
	}
	float priorities[MAX_QUEUES] = {1, 1, 1, 1, 1, 1, 1, 1};
	VkDeviceQueueCreateInfo queues[2] = {
		{.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = d->compute_family,
		 .queueCount = d->num_compute_queues, .pQueuePriorities = priorities},
		{.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = d->transfer_family,
		 .queueCount = d->num_transfer_queues, .pQueuePriorities = priorities},
	};
	/* only what the kernels use: enabling every supported feature can cost performance */
	Features on = {.base = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2},
		       .v11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, .storageBuffer16BitAccess = 1},
		       .v12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .bufferDeviceAddress = 1,
			       .timelineSemaphore = 1, .storageBuffer8BitAccess = 1}};
	on.base.features.shaderInt64 = 1;
	/* the fp64 sums of grad_norm_sq and clip_by_global_norm (vulkan_submit.c refuses a kernel
	 * that declares Float64 on a device without it) */
	on.base.features.shaderFloat64 = d->float64 = f.base.features.shaderFloat64;
	on.v12.shaderFloat16 = f.v12.shaderFloat16;
	on.v12.shaderInt8 = f.v12.shaderInt8;
	on.base.features.shaderInt16 = f.base.features.shaderInt16;
	on.base.pNext = &on.v11;
	on.v11.pNext = &on.v12;
	VkDeviceCreateInfo info = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &on.base,
				   .queueCreateInfoCount = d->num_transfer_queues ? 2 : 1, .pQueueCreateInfos = queues};
	st = vulkan_check(vk->vkCreateDevice(d->physical, &info, NULL, &d->device), index, "vkCreateDevice");
	d->compute_queues = calloc(d->num_compute_queues, sizeof(VkQueue));
	d->compute_locks = calloc(d->num_compute_queues, sizeof(pthread_mutex_t));
	d->transfer_queues = calloc(d->num_transfer_queues + 1, sizeof(VkQueue));
	d->transfer_locks = calloc(d->num_transfer_queues + 1, sizeof(pthread_mutex_t));
	if (st == DATAFLOW_OK && (!d->compute_queues || !d->compute_locks || !d->transfer_queues || !d->transfer_locks))
		st = dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "vulkan backend: no memory for the queues");
	if (st != DATAFLOW_OK) {
		d->num_compute_queues = d->num_transfer_queues = 0;
		device_destroy(d);
		return st;
	}
	for (uint32_t i = 0; i < d->num_compute_queues; i++) {
		vk->vkGetDeviceQueue(d->device, d->compute_family, i, &d->compute_queues[i]);
		pthread_mutex_init(&d->compute_locks[i], NULL);
	}
	for (uint32_t i = 0; i < d->num_transfer_queues; i++) {
		vk->vkGetDeviceQueue(d->device, d->transfer_family, i, &d->transfer_queues[i]);
		pthread_mutex_init(&d->transfer_locks[i], NULL);
	}
	/* Kernels take every argument as push constants (pointers are device addresses). */
	VkPushConstantRange range = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
				     .size = d->props.limits.maxPushConstantsSize};
	VkPipelineLayoutCreateInfo layout = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
					     .pushConstantRangeCount = 1, .pPushConstantRanges = &range};
	st = vulkan_check(vk->vkCreatePipelineLayout(d->device, &layout, NULL, &d->layout), index,
			  "vkCreatePipelineLayout");
	if (st != DATAFLOW_OK) {
		device_destroy(d);
		return st;
	}
	*out = d;
	return DATAFLOW_OK;
}

Dataflow_Status vulkan_device_acquire(int index, Vulkan_Device **out)
{
	const Vulkan_Functions *vk;
	Dataflow_Status st = vulkan_loader_load(&vk);
	if (st != DATAFLOW_OK)
		return st;
	pthread_mutex_lock(&devices_lock);
	Vulkan_Device *d = devices;
	while (d && d->index != index)
		d = d->next;
	if (!d) {
		st = device_create(vk, index, &d);
		if (st == DATAFLOW_OK) {
			d->next = devices;
			devices = d;
		}
	}
	if (st == DATAFLOW_OK) {
		d->refs++;
		*out = d;
	}
	pthread_mutex_unlock(&devices_lock);
	return st;
}

/* The last handle of a device destroys it (its work is done by then). */
void vulkan_device_release(Vulkan_Device *dev)
{
	pthread_mutex_lock(&devices_lock);
	if (--dev->refs == 0) {
		Vulkan_Device **p = &devices;
		while (*p != dev)
			p = &(*p)->next;
		*p = dev->next;
		device_destroy(dev);
	}
	pthread_mutex_unlock(&devices_lock);
}

Dataflow_Status vulkan_buffer_create(Vulkan_Device *dev, uint64_t size, uint32_t type, VkBuffer *buffer,
				     VkDeviceMemory *memory)
{
	const Vulkan_Functions *vk = dev->vk;
	VkBufferCreateInfo info = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
				   .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
					    VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT,
				   .sharingMode = VK_SHARING_MODE_CONCURRENT,
				   .queueFamilyIndexCount = dev->transfer_family != dev->compute_family ? 2 : 1,
				   .pQueueFamilyIndices = (uint32_t[]){dev->compute_family, dev->transfer_family}};
	if (info.queueFamilyIndexCount == 1)
		info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
	*buffer = VK_NULL_HANDLE;
	*memory = VK_NULL_HANDLE;
	Dataflow_Status st = vulkan_check(vk->vkCreateBuffer(dev->device, &info, NULL, buffer), dev->index,
					  "vkCreateBuffer");
	if (st != DATAFLOW_OK)
		return st;
	VkMemoryRequirements req;
	vk->vkGetBufferMemoryRequirements(dev->device, *buffer, &req);
	VkMemoryAllocateFlagsInfo flags = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
					   .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT};
	VkMemoryAllocateInfo alloc = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &flags,
				      .allocationSize = req.size, .memoryTypeIndex = type};
	if (!(req.memoryTypeBits & (1u << type)))
		st = dataflow_set_error(DATAFLOW_ERR_BACKEND, "vulkan:%d: buffers cannot use memory type %u", dev->index,
					type);
	if (st == DATAFLOW_OK)
		st = vulkan_check(vk->vkAllocateMemory(dev->device, &alloc, NULL, memory), dev->index, "vkAllocateMemory");
	if (st == DATAFLOW_OK)
		st = vulkan_check(vk->vkBindBufferMemory(dev->device, *buffer, *memory, 0), dev->index,
				  "vkBindBufferMemory");
	if (st != DATAFLOW_OK) {
		vulkan_buffer_destroy(dev, *buffer, *memory);
		*buffer = VK_NULL_HANDLE;
		*memory = VK_NULL_HANDLE;
	}
	return st;
}

void vulkan_buffer_destroy(Vulkan_Device *dev, VkBuffer buffer, VkDeviceMemory memory)
{
	if (buffer)
		dev->vk->vkDestroyBuffer(dev->device, buffer, NULL);
	if (memory)
		dev->vk->vkFreeMemory(dev->device, memory, NULL);
}
