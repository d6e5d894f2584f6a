"""Loads libdataflow, libdataflowops, libdataflowcomm, libdataflowmodels and libdataflowring with cffi (ABI mode).

The declarations come from _cdef.h, which the build derives from the public C headers.
Libraries are looked up in DATAFLOW_LIB_DIR (a meson build directory, for development)
or in the package's _lib directory (pip install).
"""
import os

import cffi

_here = os.path.dirname(os.path.abspath(__file__))
LIB_DIR = os.environ.get("DATAFLOW_LIB_DIR") or os.path.join(_here, "_lib")


def _include_dirs():
    installed = os.path.join(_here, "include")
    if os.path.isdir(installed):
        return [installed]
    root = os.path.dirname(os.path.dirname(_here))  # source checkout: python/dataflow/..
    generated = os.path.join(LIB_DIR, "libdataflowops", "include")  # the build's dataflow/default_ops.h
    return [os.path.join(root, d, "include") for d in ("libdataflow", "libdataflowops", "backends/host")] + [generated]


INCLUDE_DIRS = _include_dirs()


def _load():
    cdef_path = os.path.join(LIB_DIR, "_cdef.h")
    if not os.path.exists(cdef_path):
        raise ImportError(f"dataflow: no C declarations at {cdef_path}; is the package built? "
                          "(pip install . or set DATAFLOW_LIB_DIR to a meson build directory)")
    ffi = cffi.FFI()
    with open(cdef_path) as f:
        ffi.cdef(f.read())
    core = ffi.dlopen(os.path.join(LIB_DIR, "libdataflow.so"))
    ops = ffi.dlopen(os.path.join(LIB_DIR, "libdataflowops.so"))
    comm = ffi.dlopen(os.path.join(LIB_DIR, "libdataflowcomm.so"))
    models = ffi.dlopen(os.path.join(LIB_DIR, "libdataflowmodels.so"))
    ring = ffi.dlopen(os.path.join(LIB_DIR, "libdataflowring.so"))
    return ffi, *(CheckedLibrary(library) for library in (core, ops, comm, models, ring))


class CheckedLibrary:
    """A cffi library whose functions raise BadArgumentError naming the function, instead of
    cffi's OverflowError or TypeError, for an argument its C type cannot hold (a stream of 2**40,
    a string for an int): every binding gets the check without repeating it."""

    def __init__(self, library):
        self._library = library
        # Every binding is looked up now, not at its first call: cffi looks a name up under a
        # lock it may already hold when a garbage collection runs a finalizer (a close calling
        # its destroy function for the first time) in the middle of its own parsing - a hang.
        for name in dir(library):
            try:
                getattr(self, name)
            except AttributeError:  # declared in _cdef.h for another of the five libraries
                pass

    def __getattr__(self, name):
        value = getattr(self._library, name)
        if callable(value):
            function = value

            def value(*args):
                try:
                    return function(*args)
                except (OverflowError, TypeError) as e:
                    from .errors import BadArgumentError
                    raise BadArgumentError(f"{name}: an argument does not fit its C type: {e}") from None
        setattr(self, name, value)  # looked up once
        return value


ffi, lib, opslib, commlib, modelslib, ringlib = _load()


def use_nvidia_wheels():
    """Points the CUDA backend at the libraries of pip's nvidia-* wheels (NVRTC, cuBLASLt):
    site-packages/nvidia/*/lib of this interpreter, via DATAFLOW_CUDA_LIBRARY_PATH (read by
    backends/cuda/src/cuda_library.c). A path the user set comes first. Imports nothing."""
    import glob
    import sys
    dirs = [d for p in sys.path if p for d in sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib")))]
    current = [d for d in os.environ.get("DATAFLOW_CUDA_LIBRARY_PATH", "").split(os.pathsep) if d]
    os.environ["DATAFLOW_CUDA_LIBRARY_PATH"] = os.pathsep.join(dict.fromkeys(current + dirs))
