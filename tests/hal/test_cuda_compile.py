"""Every CUDA kernel file compiles with NVRTC for sm_80 and sm_90, cleanly (an NVRTC log is a
warning, and a warning fails), through the backend's own C path (libdataflow_cuda.so's
dataflow_cuda_compile_check), and defines every kernel the backend launches from it: each
variant of each catalogue op the library registers natively (dataflow_cuda_<op>_<variant>, in
the file the library's source lookup picks) and each kernel its external ops launch by name.
Also: every catalogue op is provided on cuda, and meson embeds every kernel file. Needs NVRTC
(the nvidia-cuda-nvrtc wheel) but no GPU: in CI (CI=true) a missing NVRTC fails the test;
elsewhere it skips.

The same compiles run again with each NVRTC in PINNED_NVRTC, installed with
`pip install --no-deps --target $DATAFLOW_TEST_NVRTC_ROOT/<version> nvidia-cuda-nvrtc==<version>`
(.ci/run does), in a subprocess that points the backend at that wheel's lib directory: the
installed wheel is the newest, and the one a CUDA image ships may be older. With both, the
attention kernels' register counts (read from the cubins) fit the blocks per SM their launch
bounds ask for; and compile_cached fills the cache a device reads (tools/gpu-check --prepare)."""
import ctypes
import glob
import json
import os
import re
import struct
import subprocess
import sys

import pytest

import dataflow as df
from dataflow import cuda
from dataflow._ffi import LIB_DIR, ffi, opslib
from paths import ROOT

pytestmark = pytest.mark.slow  # NVRTC compiles of every kernel file

KERNEL_DIR = os.path.join(ROOT, "backends", "cuda", "kernels")
KERNELS = sorted(glob.glob(os.path.join(KERNEL_DIR, "*.cu")))
ARCHS = (80, 90)
# 13.0.88: its libnvrtc has no RPATH, so only the backend's preload finds libnvrtc-builtins.
PINNED_NVRTC = {"13.0.88": (13, 0)}


def _catalogue():
    """(name, native?, [variant symbol suffixes]) per catalogue entry."""
    text = lambda p: ffi.string(p).decode()  # noqa: E731
    out = []
    for i in range(opslib.dataflow_op_catalogue_size()):
        e = opslib.dataflow_op_catalogue_entry(i)
        out.append((text(e.name), e.kind == opslib.DATAFLOW_OP_NATIVE,
                    [text(e.variant_symbols[v]) for v in range(e.num_variants)]))
    return out


CATALOGUE = _catalogue()
CUDA_LIB = ctypes.CDLL(os.path.join(LIB_DIR, "libdataflow_cuda.so"))


def _exports(symbol):
    return hasattr(CUDA_LIB, symbol)


def _source_of(op):
    """The file the backend's dataflow_cuda_kernel_source gives op (its longest '_'-prefix)."""
    parts = op.split("_")
    for n in range(len(parts), 0, -1):
        path = os.path.join(KERNEL_DIR, "_".join(parts[:n]) + ".cu")
        if os.path.exists(path):
            return path
    return None


# kernels the external ops launch by name (cuda_attention.c, cuda_embedding.c)
EXTERNAL_KERNELS = {
    "attention.cu": [f"attn_fwd_{t}_{hd}" for t in ("bf16", "fp16") for hd in (64, 128, 256)]
    + [f"attn_fwd_simt_{t}" for t in ("fp32", "fp16", "bf16")] + ["attn_cudnn_check", "attn_cudnn_commit"],
    "attention_bwd.cu": [f"attn_{k}_{t}_{hd}" for k in ("dkdv", "dq") for t in ("bf16", "fp16") for hd in (64, 128, 256)]
    + [f"attn_{k}_simt_{t}" for k in ("dkdv", "dq") for t in ("fp32", "fp16", "bf16")],
    "embedding.cu": ["embedding_bwd_keys_int32", "embedding_bwd_keys_int64", "radix_histogram", "radix_scan",
                     "radix_scatter"] + [f"embedding_bwd_rows_{t}" for t in ("fp32", "fp16", "bf16")],
}


def expected_symbols(path):
    name = os.path.basename(path)
    symbols = list(EXTERNAL_KERNELS.get(name, []))
    for op, native, variants in CATALOGUE:
        if native and _exports(f"dataflow_cuda_{op}_launch") and _source_of(op) == path:
            symbols += [f"dataflow_cuda_{op}_{v}" for v in variants]
    return symbols


@pytest.fixture(scope="module")
def nvrtc():
    try:
        cuda.compile_check(os.path.join(KERNEL_DIR, "set_mem.cu"), ARCHS[0])
    except df.LoadError as e:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must compile the CUDA kernels, but NVRTC cannot be loaded: {e}")
        pytest.skip(f"NVRTC not available (pip install nvidia-cuda-nvrtc): {e}")


def test_meson_embeds_every_kernel_file():
    with open(os.path.join(ROOT, "backends", "cuda", "meson.build")) as f:
        listed = set(re.findall(r"'kernels/([^']+)'", f.read()))
    present = {os.path.basename(p) for p in glob.glob(os.path.join(KERNEL_DIR, "*.cu*"))}
    assert listed == present, f"meson lists {sorted(listed - present)} absent, misses {sorted(present - listed)}"


@pytest.mark.parametrize("op", [op for op, _, _ in CATALOGUE])
def test_every_catalogue_op_is_provided_on_cuda(op):
    """A native launch function (with a kernel source), or the external form (function + init)."""
    native = _exports(f"dataflow_cuda_{op}_launch")
    external = _exports(f"dataflow_cuda_{op}") and _exports(f"dataflow_cuda_{op}_init")
    assert native or external, f"{op}: libdataflow_cuda.so has neither a launch function nor an external form"
    if native:
        assert _source_of(op), f"{op}: no kernels/<prefix>.cu for its kernels"


def test_every_native_variant_has_a_kernel_file_expecting_it():
    covered = {s for k in KERNELS for s in expected_symbols(k)}
    for op, native, variants in CATALOGUE:
        if native and _exports(f"dataflow_cuda_{op}_launch"):
            assert {f"dataflow_cuda_{op}_{v}" for v in variants} <= covered


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kernel", KERNELS, ids=os.path.basename)
def test_kernel_compiles_without_warnings_and_defines_its_kernels(nvrtc, kernel, arch):
    log = cuda.compile_check(kernel, arch, expected_symbols(kernel))
    assert log == "", f"{os.path.basename(kernel)} for sm_{arch}: NVRTC log (warnings fail):\n{log}"


def test_errors_warnings_and_missing_kernels_are_reported(nvrtc, tmp_path):
    bad = tmp_path / "bad.cu"
    bad.write_text('extern "C" __global__ void k(float *x) { x[0] = undefined_name; }\n')
    with pytest.raises(df.DataflowError, match="undefined_name"):
        cuda.compile_check(bad, 80)
    warn = tmp_path / "warn.cu"
    warn.write_text('extern "C" __global__ void k(float *x) { int unused; x[0] = 1.0f; }\n')
    assert "unused" in cuda.compile_check(warn, 80)
    good = tmp_path / "good.cu"
    good.write_text('extern "C" __global__ void kern(float *x) { x[0] = 1.0f; }\n')
    assert cuda.compile_check(good, 80, ["kern"]) == ""
    with pytest.raises(df.DataflowError, match="has no kernel ker$"):
        cuda.compile_check(good, 80, ["ker"])  # a prefix of a defined name is not a definition


_COMPILE_ALL = """
import json, sys
import dataflow as df
from dataflow import cuda
kernels, archs, symbols = json.loads(sys.stdin.read())
out = {"version": list(cuda.nvrtc_version()[0]), "path": cuda.nvrtc_version()[1], "results": {}}
for k in kernels:
    for a in archs:
        try:
            out["results"][f"{k}:{a}"] = ["log", cuda.compile_check(k, a, symbols[k])]
        except df.DataflowError as e:
            out["results"][f"{k}:{a}"] = ["error", str(e)]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def pinned_compiles():
    """{version: the subprocess's report} for each PINNED_NVRTC, compiled once per module."""
    cache = {}

    def get(version):
        if version in cache:
            return cache[version]
        root = os.environ.get("DATAFLOW_TEST_NVRTC_ROOT", "")
        libs = sorted(glob.glob(os.path.join(root, version, "nvidia", "*", "lib"))) if root else []
        if not libs:
            why = (f"NVRTC {version} is not installed under DATAFLOW_TEST_NVRTC_ROOT={root!r} (pip install --no-deps "
                   f"--target $DATAFLOW_TEST_NVRTC_ROOT/{version} nvidia-cuda-nvrtc=={version})")
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"CI must compile the CUDA kernels with NVRTC {version} too: {why}")
            pytest.skip(why)
        env = dict(os.environ, DATAFLOW_CUDA_LIBRARY_PATH=os.pathsep.join(libs))
        request = json.dumps([KERNELS, ARCHS, {k: expected_symbols(k) for k in KERNELS}])
        run = subprocess.run([sys.executable, "-c", _COMPILE_ALL], input=request, env=env, capture_output=True,
                             text=True, timeout=1800)
        assert run.returncode == 0, f"compiling with NVRTC {version} crashed:\n{run.stderr[-4000:]}"
        cache[version] = json.loads(run.stdout)
        return cache[version]

    return get


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kernel", KERNELS, ids=os.path.basename)
@pytest.mark.parametrize("version", sorted(PINNED_NVRTC))
def test_kernel_compiles_with_pinned_nvrtc(pinned_compiles, version, kernel, arch):
    report = pinned_compiles(version)
    assert tuple(report["version"]) == PINNED_NVRTC[version], \
        f"asked for NVRTC {version}, the backend loaded {report['version']} from {report['path']}"
    root = os.path.abspath(os.environ["DATAFLOW_TEST_NVRTC_ROOT"])
    assert os.path.abspath(report["path"]).startswith(root + os.sep), f"loaded {report['path']}, not from {root}"
    kind, text = report["results"][f"{kernel}:{arch}"]
    assert kind == "log" and text == "", \
        f"{os.path.basename(kernel)} for sm_{arch} with NVRTC {version} ({report['path']}): {kind}:\n{text}"


def test_compile_cached_fills_the_cache_a_device_reads(nvrtc, tmp_path, monkeypatch):
    """compile_cached writes the cubin the first use on an sm_80 device would look up (named by
    arch and NVRTC version), and a second call reads it instead of compiling."""
    monkeypatch.setenv("DATAFLOW_CACHE_DIR", str(tmp_path))
    (major, minor), _ = cuda.nvrtc_version()
    cuda.compile_cached("set_mem.cu", 80)
    (cubin,) = tmp_path.iterdir()
    assert cubin.name.endswith(f"-sm_80-nvrtc{major}.{minor}.cubin") and cubin.stat().st_size > 0
    cubin.write_bytes(b"sentinel")  # read back, not recompiled
    cuda.compile_cached("set_mem.cu", 80)
    assert cubin.read_bytes() == b"sentinel"
    with pytest.raises(df.BadArgumentError, match="embedded kernel source"):
        cuda.compile_cached("no_such_file.cu", 80)


def _elf_sections(data):
    """[(name, type, offset, size, link)] of an ELF64 image's sections, by index."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = raw[shstrndx][4]
    return [(_cstring(data, names + r[0]), r[1], r[4], r[5], r[6]) for r in raw]


def _cstring(data, offset):
    return data[offset:data.index(b"\0", offset)].decode()


def cubin_registers(data):
    """kernel -> registers per thread, from the cubin's .nv.info attributes (EIATTR_REGCOUNT)."""
    sections = _elf_sections(data)
    _, _, sym_off, sym_size, strtab = next(s for s in sections if s[1] == 2)  # SHT_SYMTAB
    str_off = sections[strtab][2]
    symbols = [_cstring(data, str_off + struct.unpack_from("<I", data, sym_off + i * 24)[0])
               for i in range(sym_size // 24)]
    _, _, off, size, _ = next(s for s in sections if s[0] == ".nv.info")
    out, end = {}, off + size
    while off < end:
        fmt, attr = data[off], data[off + 1]
        if fmt == 4:  # EIFMT_SVAL: a 16-bit size, then that many bytes
            n, = struct.unpack_from("<H", data, off + 2)
            if attr == 0x2F:  # EIATTR_REGCOUNT: (symbol index, registers)
                sym, regs = struct.unpack_from("<II", data, off + 4)
                out[symbols[sym]] = regs
            off += 4 + n
        else:  # EIFMT_NVAL, BVAL, HVAL: the value fits the 4-byte header
            off += 4
    return out


# kernels whose __launch_bounds__ ask for several blocks per SM (attention_params.cuh):
# kernel -> (threads per block, blocks): registers within 65536 / (threads * blocks)
OCCUPANCY = {**{f"attn_fwd_{t}_{hd}": (256, 2) for t in ("bf16", "fp16") for hd in (64, 128)},
             **{f"attn_dq_{t}_{hd}": (128, 3) for t in ("bf16", "fp16") for hd in (64, 128)}}


@pytest.mark.parametrize("version", ["installed"] + sorted(PINNED_NVRTC))
def test_attention_kernels_fit_their_blocks_per_sm(nvrtc, version, tmp_path):
    """ptxas honours the launch bounds: the d64/d128 forward fits two blocks per SM and dQ three,
    for sm_90, with the newest NVRTC and the pinned one (13.0 gave the forward 167 and 186
    registers unbounded: one block per SM)."""
    env = dict(os.environ, DATAFLOW_CACHE_DIR=str(tmp_path))
    if version != "installed":
        libs = sorted(glob.glob(os.path.join(os.environ.get("DATAFLOW_TEST_NVRTC_ROOT", "/nonexistent"), version,
                                             "nvidia", "*", "lib")))
        if not libs:
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"CI must check the kernels with NVRTC {version} too (DATAFLOW_TEST_NVRTC_ROOT)")
            pytest.skip(f"NVRTC {version} is not installed under DATAFLOW_TEST_NVRTC_ROOT")
        env["DATAFLOW_CUDA_LIBRARY_PATH"] = os.pathsep.join(libs)
    run = subprocess.run([sys.executable, "-c", "from dataflow import cuda\n"
                          "for f in ('attention.cu', 'attention_bwd.cu'): cuda.compile_cached(f, 90)"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    registers = {}
    for cubin in tmp_path.glob("*.cubin"):
        registers.update(cubin_registers(cubin.read_bytes()))
    for kernel, (threads, blocks) in OCCUPANCY.items():
        assert registers[kernel] <= 65536 // (threads * blocks), \
            f"{kernel}: {registers[kernel]} registers do not fit {blocks} blocks of {threads} threads per SM"
