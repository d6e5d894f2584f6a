#ifndef DATAFLOW_VULKAN_H
#define DATAFLOW_VULKAN_H

/* What the Vulkan backend (libdataflow_vulkan.so) offers beyond the handle interface. */

#include <stddef.h>
#include <stdint.h>

#include "dataflow/status.h"

typedef struct {
	int index;             /* "vulkan:<index>" */
	char name[256];
	char type[16];         /* "discrete", "integrated", "virtual", "cpu", "other" */
	uint32_t vendor_id, device_id;
	uint32_t api_version;  /* VK_MAKE_API_VERSION packing */
	uint64_t device_local_bytes; /* the largest device-local heap */
	uint32_t max_shared_memory_bytes, subgroup_size;
	int usable;            /* 1 if a handle can use it */
	char missing[256];     /* if not: the features it lacks */
} Dataflow_Vulkan_Device_Info;

/* A compute kernel as register_native_code takes it on vulkan: a shared object exports one
 * per kernel symbol (SPIR-V words; arguments as push constants, see the backend's
 * vulkan_register.c). */
typedef struct {
	const uint32_t *words;
	size_t size_bytes;
} Dataflow_Vulkan_Shader;

/* Lists the Vulkan devices (*count of them; the first max go into devices, which may be NULL
 * when max is 0). Fails, naming what was tried, when there is no Vulkan loader or driver. */
Dataflow_Status dataflow_vulkan_list_devices(Dataflow_Vulkan_Device_Info *devices, int max, int *count);

#endif
