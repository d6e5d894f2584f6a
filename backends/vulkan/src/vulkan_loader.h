#ifndef DATAFLOW_VULKAN_LOADER_H
#define DATAFLOW_VULKAN_LOADER_H

/* The Vulkan loader (libvulkan.so.1), opened with dlopen at run time so that the package
 * imports and the other backends work on machines without Vulkan. One instance per process,
 * made on first use and kept; functions resolved through vkGetInstanceProcAddr. */

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "dataflow/status.h"

#define VULKAN_FUNCTIONS(X)                                                                        \
	X(vkEnumeratePhysicalDevices)                                                              \
	X(vkGetPhysicalDeviceProperties)                                                           \
	X(vkGetPhysicalDeviceProperties2)                                                          \
	X(vkGetPhysicalDeviceFeatures2)                                                            \
	X(vkGetPhysicalDeviceMemoryProperties)                                                     \
	X(vkGetPhysicalDeviceQueueFamilyProperties)                                                \
	X(vkCreateDevice)                                                                          \
	X(vkDestroyDevice)                                                                         \
	X(vkGetDeviceQueue)                                                                        \
	X(vkDeviceWaitIdle)                                                                        \
	X(vkQueueSubmit)                                                                           \
	X(vkQueueWaitIdle)                                                                         \
	X(vkCreateSemaphore)                                                                       \
	X(vkDestroySemaphore)                                                                      \
	X(vkGetSemaphoreCounterValue)                                                              \
	X(vkWaitSemaphores)                                                                        \
	X(vkSignalSemaphore)                                                                       \
	X(vkCreateCommandPool)                                                                     \
	X(vkDestroyCommandPool)                                                                    \
	X(vkAllocateCommandBuffers)                                                                \
	X(vkFreeCommandBuffers)                                                                    \
	X(vkBeginCommandBuffer)                                                                    \
	X(vkEndCommandBuffer)                                                                      \
	X(vkCmdCopyBuffer)                                                                         \
	X(vkCmdFillBuffer)                                                                         \
	X(vkCmdPipelineBarrier)                                                                    \
	X(vkCmdBindPipeline)                                                                       \
	X(vkCmdPushConstants)                                                                      \
	X(vkCmdDispatch)                                                                           \
	X(vkAllocateMemory)                                                                        \
	X(vkFreeMemory)                                                                            \
	X(vkMapMemory)                                                                             \
	X(vkCreateBuffer)                                                                          \
	X(vkDestroyBuffer)                                                                         \
	X(vkGetBufferMemoryRequirements)                                                           \
	X(vkBindBufferMemory)                                                                      \
	X(vkGetBufferDeviceAddress)                                                                \
	X(vkCreateShaderModule)                                                                    \
	X(vkDestroyShaderModule)                                                                   \
	X(vkCreatePipelineLayout)                                                                  \
	X(vkDestroyPipelineLayout)                                                                 \
	X(vkCreateComputePipelines)                                                                \
	X(vkDestroyPipeline)

typedef struct {
	VkInstance instance;
#define VULKAN_FIELD(name) PFN_##name name;
	VULKAN_FUNCTIONS(VULKAN_FIELD)
#undef VULKAN_FIELD
} Vulkan_Functions;

/* Loads the loader and makes the instance (Vulkan 1.2 or later), once. Errors name what was
 * tried: "vulkan backend: no Vulkan loader (tried libvulkan.so.1, libvulkan.so: ...); install
 * a Vulkan driver (Debian: libvulkan1 mesa-vulkan-drivers)". */
Dataflow_Status vulkan_loader_load(const Vulkan_Functions **vk);

#endif
