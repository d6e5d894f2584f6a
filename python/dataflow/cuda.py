"""CUDA-backend utilities that need no GPU (imported on demand, never by `import dataflow`).
Their declarations come from dataflow/cuda.h with the rest (_cdef.h)."""
import os

from ._ffi import LIB_DIR, ffi, use_nvidia_wheels
from .errors import check

_lib = None


def compile_check(source_path, arch):
    """Compiles a .cu file with NVRTC for sm_<arch> through the backend's own C path
    (libdataflow_cuda.so), without cache or GPU. Returns NVRTC's log ("" when clean);
    raises DataflowError (LoadError when NVRTC cannot be loaded) with the log on failure."""
    global _lib
    if _lib is None:
        use_nvidia_wheels()
        _lib = ffi.dlopen(os.path.join(LIB_DIR, "libdataflow_cuda.so"))
    log = ffi.new("char[]", 1 << 16)
    check(_lib.dataflow_cuda_compile_check(os.fspath(source_path).encode(), int(arch), log, len(log)))
    return ffi.string(log).decode(errors="replace")
