"""Determinism checks shared by the op tests. A test module defines `_run_all(h, **kwargs)`, a
generator of output arrays; these helpers require its bits not to depend on the thread count
or the SIMD path.

The SIMD path (DATAFLOW_SIMD=avx512|avx2|scalar) is chosen once per process, so each level runs in
a fresh interpreter. A level the CPU lacks falls back to the best it has, which must agree too.
"""
import importlib.util
import json
import os
import subprocess
import sys

import dataflow as df
from paths import HELPERS, TESTS, find_test_file

LEVELS = ("avx512", "avx2", "scalar")

_SCRIPT = r"""
import hashlib, json, sys
import dataflow as df
sys.path[:0] = sys.argv[1].split(":")  # the test's folder, tests/helpers, tests (conftest)
module = __import__(sys.argv[2])
digest = hashlib.sha256()
with df.Handle("host", threads=2) as h:
    for out in module._run_all(h, **json.loads(sys.argv[3])):
        digest.update(out.tobytes())
print(digest.hexdigest())
"""


def load_test_module(name):
    """The test module `name` (which defines _run_all), as pytest imported it or from its folder."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, find_test_file(name + ".py"))
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def digests_by_level(module, **kwargs):
    """{level: sha256 of the module's _run_all outputs under that level}."""
    here = ":".join([os.path.dirname(find_test_file(module + ".py")), HELPERS, TESTS])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(df.__file__)), env.get("PYTHONPATH", "")])
    digests = {}
    for level in LEVELS:
        env["DATAFLOW_SIMD"] = level
        out = subprocess.run([sys.executable, "-c", _SCRIPT, here, module, json.dumps(kwargs)], env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        digests[level] = out.stdout.strip()
    return digests


def assert_simd_levels_agree(module, **kwargs):
    digests = digests_by_level(module, **kwargs)
    assert len(set(digests.values())) == 1, digests
    return digests


def assert_thread_counts_agree(run_all, **kwargs):
    """run_all's outputs are bitwise the same with 1 and 2 compute threads."""
    with df.Handle("host", threads=1) as h1, df.Handle("host", threads=2) as h2:
        count = 0
        for one, two in zip(run_all(h1, **kwargs), run_all(h2, **kwargs), strict=True):
            assert one.shape == two.shape and one.tobytes() == two.tobytes(), f"output {count} differs"
            count += 1
        assert count > 0
