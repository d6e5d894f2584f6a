"""What this build of the C libraries was built with (written by meson into _build_info.json beside
the libraries): the host matmul's engine above all, since without oneDNN it runs at about half speed."""
import functools
import json
import os
import warnings

from ._ffi import LIB_DIR

SLOW = ("the host matmul uses the built-in fallback: this build has no oneDNN, so matmuls (most of training) "
        "run at about half speed. `pip install .` takes oneDNN from PyPI (onednn-cpu-gomp); a meson build finds "
        "it there or in Debian's libdnnl-dev")


@functools.lru_cache(maxsize=None)
def info():
    """{"onednn": version or "", "onednn_source": where meson found it, "version": dataflow's}."""
    try:
        with open(os.path.join(LIB_DIR, "_build_info.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"onednn": "", "onednn_source": "unknown (no _build_info.json)", "version": "unknown"}


def matmul_engine():
    """The host matmul engine a new handle uses, in words."""
    forced = os.environ.get("DATAFLOW_HOST_MATMUL", "auto")
    if not info()["onednn"]:
        return "built-in fallback (no oneDNN in this build: about half speed)"
    if forced == "fallback":
        return "built-in fallback (DATAFLOW_HOST_MATMUL=fallback)"
    return f"oneDNN {info()['onednn']} ({info()['onednn_source']})"


# The /proc/cpuinfo flags that choose a host summation order: the host kernels' vector path
# and the oneDNN kernels (VNNI, BF16 and AMX ones included).
_ORDER_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")


def cpu_report():
    """One line naming what decides the host backend's fp32 summation order on this machine: the
    CPU and its vector features, the host kernels' SIMD path (DATAFLOW_SIMD caps it) and the
    host matmul's engine with the ISA oneDNN runs (ONEDNN_MAX_CPU_ISA caps it)."""
    import ctypes
    import platform
    from ._ffi import ffi, lib
    from .handle import Handle
    name, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    name = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    simd = ("scalar", "avx2", "avx512")[lib.dataflow_simd_level()]
    engine = matmul_engine()
    if info()["onednn"] and os.environ.get("DATAFLOW_HOST_MATMUL") != "fallback":
        with Handle("host", streams=1, register_default_ops=False) as h:
            ops = ffi.string(lib.dataflow_handle_default_ops_library(h._ptr())).decode()
        isa = ctypes.CDLL(ops).dataflow_host_onednn_isa
        isa.restype = ctypes.c_char_p
        engine += f", ISA {isa().decode().removeprefix('cpu_isa_')}"
    features = " ".join(f for f in _ORDER_FLAGS if f in flags) or "unknown"
    return f"CPU {name} ({features}); host kernels: {simd}; host matmul: {engine}"


def load_pip_onednn():
    """Loads pip's libdnnl.so.3 (onednn-cpu-gomp) into the process when this build linked against it, so
    the host backend finds it whatever the install layout; the libraries' rpath covers the usual ones."""
    if not info()["onednn_source"].startswith("PyPI"):
        return
    import ctypes
    from importlib import metadata
    try:
        files = metadata.distribution("onednn-cpu-gomp").files or ()
    except metadata.PackageNotFoundError:
        return  # then the rpath must find it, or creating a host handle fails naming libdnnl.so.3
    for f in files:
        if os.path.basename(str(f)) == "libdnnl.so.3":
            ctypes.CDLL(str(f.locate()), mode=ctypes.RTLD_GLOBAL)
            return


def warn_if_slow():
    """A RuntimeWarning (once) when the build lacks oneDNN and nobody chose the fallback explicitly."""
    if not info()["onednn"] and os.environ.get("DATAFLOW_HOST_MATMUL") != "fallback":
        warnings.warn(f"dataflow: {SLOW}", RuntimeWarning, stacklevel=3)
