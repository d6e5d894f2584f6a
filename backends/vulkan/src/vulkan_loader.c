#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "vulkan_backend.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static Vulkan_Functions functions;
static Dataflow_Status load_status;
static char load_message[1024];

static const char *result_name(VkResult r)
{
	switch (r) {
	case VK_SUCCESS: return "VK_SUCCESS";
	case VK_NOT_READY: return "VK_NOT_READY";
	case VK_TIMEOUT: return "VK_TIMEOUT";
	case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
	case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
	case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
	case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
	case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
	case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
	case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
	case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
	default: return "VkResult";
	}
}

Dataflow_Status vulkan_check(VkResult r, int index, const char *what)
{
	if (r == VK_SUCCESS)
		return DATAFLOW_OK;
	Dataflow_Status st = r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY
				     ? DATAFLOW_ERR_OUT_OF_MEMORY
				     : DATAFLOW_ERR_BACKEND;
	return dataflow_set_error(st, "vulkan:%d: %s failed: %s (%d)", index, what, result_name(r), (int)r);
}

static Dataflow_Status fail(Dataflow_Status st, const char *fmt, const char *detail)
{
	snprintf(load_message, sizeof(load_message), fmt, detail);
	return st;
}

static Dataflow_Status load(void)
{
	const char *names[] = {"libvulkan.so.1", "libvulkan.so"};
	char tried[512] = "";
	void *lib = NULL;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !lib; i++) {
		lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (!lib)
			snprintf(tried + strlen(tried), sizeof(tried) - strlen(tried), "%s%s", i ? "; " : "", dlerror());
	}
	if (!lib)
		return fail(DATAFLOW_ERR_LOAD_FAILED,
			    "vulkan backend: no Vulkan loader (%s); install one with a driver (Debian: libvulkan1 "
			    "mesa-vulkan-drivers for lavapipe, or the GPU vendor's driver)",
			    tried);
	PFN_vkGetInstanceProcAddr gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
	PFN_vkCreateInstance create = gipa ? (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance") : NULL;
	if (!create)
		return fail(DATAFLOW_ERR_LOAD_FAILED, "vulkan backend: %s lacks vkGetInstanceProcAddr/vkCreateInstance",
			    "the Vulkan loader");
	VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "dataflow",
				 .apiVersion = VK_API_VERSION_1_2};
	VkInstanceCreateInfo info = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
	VkResult r = create(&info, NULL, &functions.instance);
	if (r != VK_SUCCESS) {
		char detail[64];
		snprintf(detail, sizeof(detail), "%d", (int)r);
		return fail(DATAFLOW_ERR_BACKEND,
			    "vulkan backend: the loader found no usable Vulkan 1.2 driver (vkCreateInstance returned %s); "
			    "install one (Debian: mesa-vulkan-drivers for lavapipe, or the GPU vendor's driver)",
			    detail);
	}
	const char *missing = NULL;
#define VULKAN_RESOLVE(name)                                                                        \
	functions.name = (PFN_##name)gipa(functions.instance, #name);                               \
	if (!functions.name && !missing)                                                            \
		missing = #name;
	VULKAN_FUNCTIONS(VULKAN_RESOLVE)
#undef VULKAN_RESOLVE
	if (missing)
		return fail(DATAFLOW_ERR_LOAD_FAILED, "vulkan backend: the Vulkan loader lacks %s (Vulkan 1.2 needed)",
			    missing);
	return DATAFLOW_OK;
}

static void load_once(void)
{
	load_status = load();
}

Dataflow_Status vulkan_loader_load(const Vulkan_Functions **vk)
{
	pthread_once(&once, load_once);
	if (load_status != DATAFLOW_OK)
		return dataflow_set_error(load_status, "%s", load_message);
	*vk = &functions;
	return DATAFLOW_OK;
}
