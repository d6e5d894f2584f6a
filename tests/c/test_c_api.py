"""The C side: `meson test` (the C test program), a C program built against the installed
headers with pkg-config, and the same C test under ASan + UBSan."""
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import paths

pytestmark = pytest.mark.slow  # builds and runs the C tests, one build under ASan+UBSan

ROOT = Path(paths.ROOT)
MESON = [sys.executable, "-m", "mesonbuild.mesonmain"]
PIP_ONEDNN = importlib.util.find_spec("mesonbuild") is not None and any(
    d.metadata["Name"] == "onednn-devel-cpu-gomp" for d in importlib.metadata.distributions())


def run(cmd, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("c_api")
    build, prefix = tmp / "build", tmp / "prefix"
    setup = run(MESON + ["setup", build, ROOT, f"--prefix={prefix}", "--libdir=lib"])
    if PIP_ONEDNN:  # the README's block pip-installs it: meson must find it, not build the fallback
        assert re.search(r"oneDNN\s*: \S+ \(PyPI onednn-cpu-gomp", setup) and "oneDNN not found" not in setup, setup
    run(MESON + ["compile", "-C", build])
    out = run(MESON + ["test", "-C", build, "--print-errorlogs"])
    assert re.search(r"c_matmul\s+OK", out) and re.search(r"Fail:\s+0\b", out), out
    run(MESON + ["install", "-C", build])
    return prefix


def test_installed_layout(installed):
    for header in ("dataflow.h", "handle.h", "op.h", "op_impl.h", "backend.h", "datatype.h", "status.h", "ops.h",
                   "host_kernel.h"):
        assert (installed / "include" / "dataflow" / header).is_file()
    for library in ("libdataflow.so", "libdataflowops.so", "libdataflow_host.so", "libdataflow_host_ops.so"):
        assert (installed / "lib" / library).is_file()


@pytest.mark.skipif(shutil.which("pkg-config") is None, reason="pkg-config is not installed")
def test_c_program_builds_with_pkg_config(installed, tmp_path):
    env = dict(os.environ, PKG_CONFIG_PATH=str(installed / "lib" / "pkgconfig"))
    flags = run(["pkg-config", "--cflags", "--libs", "dataflow"], env=env).split()
    exe = tmp_path / "test_matmul"
    cc = os.environ.get("CC", "cc")
    run([cc, ROOT / "tests" / "c" / "test_matmul.c", "-o", exe, *flags, "-lm", f"-Wl,-rpath,{installed / 'lib'}"])
    assert run([exe]).strip().endswith("ok")


def test_sanitized_c_test(tmp_path):
    """The C tests under ASan + UBSan. Leak checking runs with the built-in matmul: at exit,
    LeakSanitizer's tracer has crashed now and then while suspending the OpenMP threads that
    oneDNN leaves alive (third-party threads, not ours); the oneDNN run keeps ASan and UBSan."""
    build = tmp_path / "asan"
    run(MESON + ["setup", build, ROOT, "-Db_sanitize=address,undefined", "-Db_lundef=false", "-Dbuildtype=debug"])
    run(MESON + ["compile", "-C", build])
    for matmul, leaks in (("fallback", 1), ("auto", 0)):
        env = dict(os.environ, UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
                   ASAN_OPTIONS=f"detect_leaks={leaks}:abort_on_error=1", DATAFLOW_HOST_MATMUL=matmul)
        out = run(MESON + ["test", "-C", build, "--print-errorlogs"], env=env)
        assert re.search(r"c_matmul\s+OK", out) and re.search(r"Fail:\s+0\b", out), out


def test_readme_c_snippet_runs_without_environment_variables(installed, tmp_path):
    """The README's C snippet (examples/c/matmul.c built with pkg-config) against an install in a
    temporary prefix: PKG_CONFIG_PATH points pkg-config there, as the README says for a custom prefix;
    the program runs with no LD_LIBRARY_PATH (dataflow.pc carries the rpath)."""
    readme = (ROOT / "README.md").read_text()
    snippet = readme.split("<!-- readme-check: c-install -->\n```sh\n", 1)[1].split("```", 1)[0]
    pip, setup, compile_and_run = snippet.strip().splitlines()
    # what a fresh environment lacks, installed as pip names it; this one has them (from .[test])
    assert pip == "pip install meson ninja onednn-devel-cpu-gomp==2023.2.0"
    for name in pip.split()[2:]:
        name, _, version = name.partition("==")
        assert importlib.metadata.version(name) == (version or importlib.metadata.version(name)), name
    assert setup == "meson setup build && meson install -C build"  # what the `installed` fixture did, with --prefix
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "DATAFLOW_LIB_DIR")}
    env["PKG_CONFIG_PATH"] = str(installed / "lib" / "pkgconfig")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    r = subprocess.run(["bash", "-e", "-c", compile_and_run], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "bf16 matmul 64x48x32 on the host backend: exact" in r.stdout
