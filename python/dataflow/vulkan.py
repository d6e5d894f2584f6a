"""Vulkan-backend utilities (imported on demand, never by `import dataflow`). Their
declarations come from dataflow/vulkan.h with the rest (_cdef.h)."""
import os

from ._ffi import LIB_DIR, ffi
from .errors import LoadError, check

_lib = None


def list_devices():
    """The Vulkan devices as dicts (index, name, type, vendor_id, device_id, api_version as
    "major.minor.patch", device_local_bytes, max_shared_memory_bytes, subgroup_size, usable,
    missing: the features an unusable one lacks). Raises DataflowError naming what was tried
    when there is no Vulkan loader or driver, LoadError when the backend was not built."""
    global _lib
    if _lib is None:
        path = os.path.join(LIB_DIR, "libdataflow_vulkan.so")
        if not os.path.exists(path):
            raise LoadError(f"vulkan backend not built: {path} is missing (build with libvulkan-dev and glslc)")
        _lib = ffi.dlopen(path)
    count = ffi.new("int *")
    check(_lib.dataflow_vulkan_list_devices(ffi.NULL, 0, count))
    infos = ffi.new("Dataflow_Vulkan_Device_Info[]", max(count[0], 1))
    check(_lib.dataflow_vulkan_list_devices(infos, count[0], count))
    devices = []
    for d in infos[0:count[0]]:
        v = d.api_version
        devices.append(dict(index=d.index, name=ffi.string(d.name).decode(), type=ffi.string(d.type).decode(),
                            vendor_id=d.vendor_id, device_id=d.device_id,
                            api_version=f"{v >> 22 & 0x7f}.{v >> 12 & 0x3ff}.{v & 0xfff}",
                            device_local_bytes=d.device_local_bytes, max_shared_memory_bytes=d.max_shared_memory_bytes,
                            subgroup_size=d.subgroup_size, usable=bool(d.usable),
                            missing=ffi.string(d.missing).decode()))
    return devices
