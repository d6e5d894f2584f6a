"""CUDA-backend utilities that need no GPU (imported on demand, never by `import dataflow`).
Their declarations come from dataflow/cuda.h with the rest (_cdef.h)."""
import os

from ._ffi import LIB_DIR, ffi, use_nvidia_wheels
from .errors import check

_lib = None


def compile_check(source_path, arch, symbols=()):
    """Compiles a .cu file with NVRTC for sm_<arch> through the backend's own C path
    (libdataflow_cuda.so), without cache or GPU, and checks that the cubin defines each of
    `symbols`. Returns NVRTC's log ("" when clean); raises DataflowError (LoadError when NVRTC
    cannot be loaded) with the log on failure, or naming the first missing symbol."""
    log = ffi.new("char[]", 1 << 16)
    names = [ffi.new("char[]", s.encode()) for s in symbols]
    array = ffi.new("const char *[]", names) if names else ffi.NULL
    check(_library().dataflow_cuda_compile_check(os.fspath(source_path).encode(), int(arch), array, len(names), log,
                                                 len(log)))
    return ffi.string(log).decode(errors="replace")


def compile_cached(source_name, arch):
    """Compiles the embedded kernel source `source_name` ("attention.cu") for sm_<arch> into the
    NVRTC cache (DATAFLOW_CACHE_DIR), as its first use on such a device would; no GPU needed."""
    check(_library().dataflow_cuda_compile_cached(source_name.encode(), int(arch)))


def nvrtc_version():
    """((major, minor), path of the libnvrtc loaded) of the NVRTC the backend compiles with;
    raises LoadError when none can be loaded."""
    major, minor, path = ffi.new("int *"), ffi.new("int *"), ffi.new("char[]", 4096)
    check(_library().dataflow_cuda_nvrtc_version(major, minor, path, len(path)))
    return (major[0], minor[0]), ffi.string(path).decode(errors="replace")


def attention_last_choice():
    """What the calling thread's last attention submission on a CUDA handle ran ("cudnn ...",
    "mma d<bucket> ..." or "simt ...", with the reason); "" before any."""
    return ffi.string(_library().dataflow_cuda_attention_last_choice()).decode()


def _library():
    global _lib
    if _lib is None:
        use_nvidia_wheels()
        _lib = ffi.dlopen(os.path.join(LIB_DIR, "libdataflow_cuda.so"))
    return _lib
