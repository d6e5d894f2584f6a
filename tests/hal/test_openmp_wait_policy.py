"""The host backend's OpenMP teams (oneDNN's matmuls, the kernels) sleep when idle by default
(OMP_WAIT_POLICY=PASSIVE, set by libdataflow as it loads), so they do not spin against other
processes; a policy the user chose is kept. Checked with libgomp's own report of what it read
(OMP_DISPLAY_ENV), in a fresh interpreter since libgomp reads its environment once."""
import os
import subprocess
import sys

import pytest

RUN_A_MATMUL = """
import numpy as np
import dataflow as df
with df.Handle("host", threads=2) as h:
    a = h.from_numpy(np.ones((64, 64), np.float32))
    df.ops.matmul(h, a, a).numpy()
"""


def _policy_libgomp_read(**env):
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", RUN_A_MATMUL], env={**base, "OMP_DISPLAY_ENV": "true", **env},
                         capture_output=True, text=True, timeout=120, check=True)
    if "OPENMP DISPLAY ENVIRONMENT" not in out.stderr:
        pytest.skip("this build's host backend does not use OpenMP (no oneDNN, or no OpenMP compiler support)")
    return [line.split("=", 1)[1].strip() for line in out.stderr.splitlines() if "OMP_WAIT_POLICY" in line]


def test_default_wait_policy_is_passive():
    assert _policy_libgomp_read() == ["'PASSIVE'"]


@pytest.mark.parametrize("chosen", ["ACTIVE", "PASSIVE"])
def test_users_wait_policy_is_kept(chosen):
    assert _policy_libgomp_read(OMP_WAIT_POLICY=chosen) == [f"'{chosen}'"]
